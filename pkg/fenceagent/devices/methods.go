package devices

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"fenceline.io/fenceline/pkg/fenceagent/exec"
	"fenceline.io/fenceline/pkg/fenceagent/ipmi"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
)

// newRedfish is the Redfish constructor: the endpoint's address and
// systemID, the class's reset type and TLS choice, the Secret's CA.
func newRedfish(in Input) (power.Device, error) {
	cfg := redfish.Config{
		Address:  in.Endpoint.Address,
		SystemID: in.Endpoint.SystemID,
		Username: in.Credentials.Username,
		Password: in.Credentials.Password,
		Timeout:  in.Timeout,
	}
	if s := in.Class.Spec.Redfish; s != nil {
		cfg.ResetType, cfg.InsecureTLS = s.ResetType, s.InsecureTLS
	}
	if len(in.Credentials.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(in.Credentials.CA) {
			return nil, fmt.Errorf("key %q of the credentials Secret holds no PEM certificate", CAKey)
		}
		cfg.RootCAs = pool
	}
	return redfish.New(cfg)
}

// newIPMI is the IPMI constructor: host[:port] from the endpoint, the
// interface, cipher suite and privilege from the class.
func newIPMI(in Input) (power.Device, error) {
	host, port, err := splitHostPort(in.Endpoint.Address, ipmi.DefaultPort)
	if err != nil {
		return nil, err
	}
	cfg := ipmi.Config{
		Host:     host,
		Port:     port,
		Username: in.Credentials.Username,
		Password: in.Credentials.Password,
		Timeout:  in.Timeout,
	}
	if s := in.Class.Spec.IPMI; s != nil {
		cfg.Interface, cfg.Privilege = ipmi.Interface(s.Interface), ipmi.Privilege(s.Privilege)
		if s.CipherSuite != nil {
			cfg.CipherSuite = int(*s.CipherSuite)
		}
	}
	if in.Endpoint.SystemID != "" || in.Endpoint.Plug != "" {
		return nil, errors.New("systemID and plug do not apply to IPMI")
	}
	return ipmi.New(cfg)
}

// newExec is the fence-agent constructor: the agent and its options from
// the class, the address and plug from the endpoint. The agent is looked
// up only in the allow-listed directories of the exec package.
func newExec(in Input) (power.Device, error) {
	s := in.Class.Spec.Exec
	if s == nil {
		return nil, errors.New("an Exec FenceClass needs its exec settings")
	}
	if in.Endpoint.SystemID != "" {
		return nil, errors.New("systemID does not apply to a fence agent; use plug, or the agent's own option in args")
	}
	return exec.New(exec.Config{
		Agent:    s.Agent,
		Address:  in.Endpoint.Address,
		Plug:     in.Endpoint.Plug,
		Username: in.Credentials.Username,
		Password: in.Credentials.Password,
		Args:     s.Args,
		Timeout:  in.Timeout,
	})
}

// splitHostPort splits host, host:port, [v6] or [v6]:port.
func splitHostPort(addr string, defaultPort int) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		if ip := net.ParseIP(addr); ip != nil || !strings.Contains(addr, ":") {
			return addr, defaultPort, nil
		}
		if len(addr) > 2 && addr[0] == '[' && addr[len(addr)-1] == ']' {
			return addr[1 : len(addr)-1], defaultPort, nil
		}
		return "", 0, fmt.Errorf("address %q: want host or host:port", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("address %q: bad port %q", addr, p)
	}
	return host, port, nil
}

// Reasons of a FenceTarget's Reachable condition, from a probe's error.
const (
	ReasonReachable            = "Reachable"
	ReasonCredentialsRejected  = "CredentialsRejected"
	ReasonCredentialsMissing   = "CredentialsMissing"
	ReasonUnreachable          = "Unreachable"
	ReasonTLSNotTrusted        = "TLSNotTrusted"
	ReasonInvalidConfiguration = "InvalidConfiguration"
	ReasonSystemNotFound       = "SystemNotFound"
	ReasonProbeFailed          = "ProbeFailed"
)

// Reason is the condition reason of a Build or Status error (nil:
// ReasonReachable).
func Reason(err error) string {
	switch {
	case err == nil:
		return ReasonReachable
	case errors.Is(err, ErrCredentials):
		return ReasonCredentialsMissing
	case errors.Is(err, ErrInvalidConfiguration):
		return ReasonInvalidConfiguration
	}
	for _, m := range Methods {
		if r := m.Reason(err); r != "" {
			return r
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ReasonUnreachable
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return ReasonUnreachable
	}
	return ReasonProbeFailed
}
