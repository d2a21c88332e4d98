// Package ipmi is an IPMI BMC simulator for tests: go-ipmi's embeddable
// reference BMC (github.com/bougou/go-ipmi/pkg/server) on a loopback UDP
// port, whose chassis power is a simulated node's (see Power), with one
// user, and faults that can be switched at run time: latency, rejected
// credentials, a power-down accepted but never done, a power-down done late,
// and a BMC that does not answer. One port serves IPMI v2.0 RMCP+ (lanplus,
// cipher suites 3 and 17 by default) and IPMI v1.5 (lan, MD5).
//
// It records every IPMI command it dispatches, by name, with the session's
// user name and the chassis control action: never a password or any request
// data.
package ipmi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/handlers"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/types"
)

// userID is the BMC user slot of the configured user (slot 1 is the
// anonymous user on real BMCs).
const userID = 2

// lanChannel is the reference BMC's LAN channel.
const lanChannel = 1

// Config describes one simulated BMC.
type Config struct {
	// Addr is the UDP address to listen on; default 127.0.0.1:0 (a free
	// loopback port). Only loopback addresses are accepted.
	Addr string
	// Username and Password are the one user's credentials; required.
	Username, Password string
	// Privilege is the user's highest privilege level; default
	// Administrator.
	Privilege bmc.PrivilegeLevel
	// CipherSuites are the RMCP+ cipher suites advertised and accepted;
	// default go-ipmi's [3 17].
	CipherSuites []types.CipherSuiteID
	// DisableV15 turns IPMI v1.5 (lan) off; lanplus stays up.
	DisableV15 bool
	// Off starts the node powered off (default: on).
	Off bool
	// Power is the node's power rail; nil keeps the power in the BMC only.
	Power Power
}

// Faults are the BMC's misbehaviours, switched with SetFaults. The zero
// value is an honest BMC.
type Faults struct {
	// Latency delays every answer.
	Latency time.Duration
	// RejectAuth makes the BMC refuse the configured credentials, as after
	// a password change on the BMC.
	RejectAuth bool
	// IgnorePowerDown accepts Chassis Control power-down and leaves the
	// node on.
	IgnorePowerDown bool
	// PowerDownDelay accepts power-down and cuts the power that much later
	// (a power-up or another power-down in between voids it).
	PowerDownDelay time.Duration
	// Unreachable drops every datagram unanswered, as a BMC that lost its
	// network or its standby power. Close stops listening altogether.
	Unreachable bool
	// ReadsOff makes Get Chassis Status report the power off whatever it
	// is, as a BMC with a stale or broken power sensor; Chassis Control
	// still acts on the real power, so a power down cuts a running node.
	ReadsOff bool
}

// Command is one IPMI command the BMC dispatched.
type Command struct {
	// At is when the command arrived.
	At time.Time
	// Name is the command's IPMI name, e.g. "Get Chassis Status".
	Name string
	// NetFn and Cmd identify the command.
	NetFn, Cmd uint8
	// User is the session's user name; empty before a session.
	User string
	// Action is Chassis Control's action ("power down", "power up",
	// "power cycle", "hard reset", "pulse diagnostic interrupt",
	// "soft shutdown"); empty for other commands.
	Action string
	// CompletionCode is the BMC's answer (0 is success).
	CompletionCode uint8
}

// Simulator is a running simulated BMC.
type Simulator struct {
	cfg  Config
	bmc  *bmc.BMC
	srv  *server.Server
	conn *faultConn
	rail *rail

	cancel context.CancelFunc
	served chan struct{}

	mu       sync.Mutex
	faults   Faults
	commands []Command
	closed   bool
}

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Simulator, error) {
	if cfg.Username == "" || cfg.Password == "" {
		return nil, errors.New("ipmi simulator: username and password are required")
	}
	if len(cfg.Username) > bmc.MaxUserNameLen || len(cfg.Password) > bmc.MaxPasswordLen {
		return nil, fmt.Errorf("ipmi simulator: user name over %d or password over %d bytes", bmc.MaxUserNameLen, bmc.MaxPasswordLen)
	}
	pc, err := listenLoopback(cfg.Addr)
	if err != nil {
		return nil, err
	}
	s := &Simulator{cfg: cfg, served: make(chan struct{})}
	s.rail = &rail{faults: s.Faults, power: cfg.Power}
	s.rail.on.Store(!cfg.Off)
	s.conn = &faultConn{conn: pc, faults: s.Faults, done: make(chan struct{})}
	if err := s.build(); err != nil {
		_ = pc.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ctx)
	}()
	return s, nil
}

func listenLoopback(addr string) (*net.UDPConn, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("ipmi simulator: resolving %q: %w", addr, err)
	}
	if !ua.IP.IsLoopback() {
		return nil, fmt.Errorf("ipmi simulator: %q is not a loopback address", addr)
	}
	pc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("ipmi simulator: listening on %q: %w", addr, err)
	}
	return pc, nil
}

// build makes the BMC, its user and its server.
func (s *Simulator) build() error {
	info := bmc.DeviceInfo{DeviceID: 0x20, DeviceRevision: 1, FirmwareMajor: 1, IPMIVersion: 0x20, ManufacturerID: 0x000157, ProductID: 1}
	var guid [16]byte
	copy(guid[:], "fenceline-bmcsim")
	var opts []bmc.Option
	if s.cfg.DisableV15 {
		opts = append(opts, bmc.WithV15Disabled())
	}
	for _, id := range s.cfg.CipherSuites {
		if !bmc.SupportedCipherSuite(id) {
			return fmt.Errorf("ipmi simulator: cipher suite %d is not implemented by go-ipmi's server", id)
		}
	}
	if len(s.cfg.CipherSuites) > 0 {
		opts = append(opts, bmc.WithCipherSuites(s.cfg.CipherSuites))
	}
	s.bmc = bmc.New(info, guid, simHAL{chassis: &chassisHAL{rail: s.rail}}, opts...)
	if err := s.setUser(s.cfg.Password); err != nil {
		return err
	}
	reg := handlers.NewRegistry()
	reg.Use(s.record)
	handlers.RegisterAllHandlers(reg)
	s.srv = server.NewServer(s.bmc, s.conn, server.WithHandlerRegistry(reg))
	return nil
}

// setUser (re)creates the user with the given password.
func (s *Simulator) setUser(password string) error {
	priv := s.cfg.Privilege
	if priv == 0 {
		priv = bmc.PrivilegeLevelAdministrator
	}
	err := s.bmc.Users.Upsert(userID, func(u *bmc.User) error {
		u.Name = s.cfg.Username
		u.SetPassword([]byte(password))
		u.Enabled = true
		if u.ChannelAccess == nil {
			u.ChannelAccess = map[uint8]bmc.UserChannelAccess{}
		}
		u.ChannelAccess[lanChannel] = bmc.UserChannelAccess{MaxPrivilege: priv, Enabled: true}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ipmi simulator: setting up the user: %w", err)
	}
	return nil
}

// Addr is the UDP address the BMC listens on.
func (s *Simulator) Addr() *net.UDPAddr { return s.conn.LocalAddr().(*net.UDPAddr) }

// Host and Port are the BMC's address, as a fence method's config takes it.
func (s *Simulator) Host() string { return s.Addr().IP.String() }

// Port is the BMC's UDP port.
func (s *Simulator) Port() int { return s.Addr().Port }

// String is the BMC's address, host:port.
func (s *Simulator) String() string { return net.JoinHostPort(s.Host(), strconv.Itoa(s.Port())) }

// PoweredOn reports the chassis power state as the BMC knows it.
func (s *Simulator) PoweredOn() bool { return s.rail.state() }

// SetPoweredOn sets the power state the BMC reads, without calling the
// Power hook, for a harness that powered the node by other means.
func (s *Simulator) SetPoweredOn(on bool) { s.rail.on.Store(on) }

// Faults returns the faults in force.
func (s *Simulator) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// SetFaults replaces the faults in force; Faults{} makes the BMC honest.
func (s *Simulator) SetFaults(f Faults) error {
	s.mu.Lock()
	rejectChanged := f.RejectAuth != s.faults.RejectAuth
	s.faults = f
	s.mu.Unlock()
	if !rejectChanged {
		return nil
	}
	password := s.cfg.Password
	if f.RejectAuth {
		b := make([]byte, 8)
		_, _ = rand.Read(b) // crypto/rand.Read never fails
		password = hex.EncodeToString(b)
	}
	return s.setUser(password)
}

// Dropped counts the datagrams dropped while Unreachable.
func (s *Simulator) Dropped() int64 { return s.conn.dropped.Load() }

// Commands returns the commands dispatched so far, oldest first.
func (s *Simulator) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Command(nil), s.commands...)
}

// Close stops listening (a client then gets no answer, or an ICMP port
// unreachable) and waits for the serve loop and any delayed power-down.
func (s *Simulator) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	err := s.srv.Close()
	<-s.served
	s.rail.close()
	if err != nil {
		return fmt.Errorf("ipmi simulator: closing: %w", err)
	}
	return nil
}
