package ipmi

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bougou/go-ipmi/pkg/types"
)

// Interface is the IPMI LAN protocol: lanplus is IPMI v2.0 RMCP+ (mutual
// authentication, integrity, encryption); lan is IPMI v1.5 (MD5 auth codes,
// no encryption), for BMCs that have nothing better.
type Interface string

// The interfaces, as ipmitool's -I names them.
const (
	InterfaceLanplus Interface = "lanplus"
	InterfaceLan     Interface = "lan"
)

// Privilege is the session's privilege level, as ipmitool's -L names it.
// Chassis Control needs OPERATOR or more.
type Privilege string

// The privilege levels that can fence.
const (
	PrivilegeAdministrator Privilege = "ADMINISTRATOR"
	PrivilegeOperator      Privilege = "OPERATOR"
)

// Defaults of Config.
const (
	DefaultPort    = 623
	DefaultTimeout = 10 * time.Second
)

// Method is how the node is fenced, as fence_ipmilan's --method names it.
type Method string

// The methods. Only onoff is accepted: see ErrCycleRefused.
const (
	MethodOnOff Method = "onoff"
	MethodCycle Method = "cycle"
)

// ErrCycleRefused is returned by Validate for the cycle method. A power
// cycle turns the node back on by itself, so there is no moment at which
// Off can be read back: fence_ipmilan warns that with --method=cycle it
// "might report success before the node is powered off". Fenceline fences
// only with a power-down whose Off is read back.
var ErrCycleRefused = errors.New("ipmi: power cycle is not a fence action: it cannot be verified off; use the onoff method")

// Config is one node's IPMI fence device.
type Config struct {
	// Host is the BMC's address; Port its UDP port (default 623).
	Host string
	Port int
	// Username and Password are the BMC credentials. They never appear in
	// an error or in String.
	Username, Password string
	// Interface is lanplus (default) or lan.
	Interface Interface
	// CipherSuite is the RMCP+ cipher suite for lanplus. 0 (default) tries
	// 17 (HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128) and falls back to 3
	// (HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128), the suite IPMI v2.0 makes
	// mandatory, as ipmitool does. Explicit values: 3, 8, 12 or 17, the
	// standard suites with authentication, integrity and confidentiality;
	// suites without integrity (0, 1, 6) would let anyone on the path forge
	// a "power is off" answer, so they are refused.
	CipherSuite int
	// Privilege is the session's privilege level (default ADMINISTRATOR).
	Privilege Privilege
	// Timeout bounds one call (session setup, command, session close);
	// default 10 s. A caller's earlier context deadline wins.
	Timeout time.Duration
	// Method is onoff (default); cycle is refused (ErrCycleRefused).
	Method Method
}

// acceptedSuites are the standard cipher suites with authentication,
// integrity and confidentiality.
var acceptedSuites = map[int]bool{3: true, 8: true, 12: true, 17: true}

// autoSuites is the order tried when CipherSuite is 0.
var autoSuites = []types.CipherSuiteID{types.CipherSuiteID17, types.CipherSuiteID3}

// maxUserName and maxPassword are IPMI v2.0's limits (v1.5 passwords: 16).
const (
	maxUserName = 16
	maxPassword = 20
)

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Interface == "" {
		c.Interface = InterfaceLanplus
	}
	c.Interface = Interface(strings.ToLower(string(c.Interface)))
	if c.Privilege == "" {
		c.Privilege = PrivilegeAdministrator
	}
	c.Privilege = Privilege(strings.ToUpper(string(c.Privilege)))
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Method == "" {
		c.Method = MethodOnOff
	}
	return c
}

// Validate reports a config under which no verified power-off can be done.
// Its errors never contain the credentials.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("host is required"))
	}
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is out of range", c.Port))
	}
	if c.Username == "" || len(c.Username) > maxUserName {
		errs = append(errs, fmt.Errorf("username must have 1 to %d bytes", maxUserName))
	}
	if len(c.Password) > maxPassword || (c.Interface == InterfaceLan && len(c.Password) > 16) {
		errs = append(errs, fmt.Errorf("password is over IPMI's limit (%d bytes for lanplus, 16 for lan)", maxPassword))
	}
	switch c.Interface {
	case InterfaceLanplus:
		if c.CipherSuite != 0 && !acceptedSuites[c.CipherSuite] {
			errs = append(errs, fmt.Errorf("cipher suite %d is refused: use 3, 8, 12 or 17 (authentication, integrity and confidentiality), or 0 for 17 then 3", c.CipherSuite))
		}
	case InterfaceLan:
		if c.CipherSuite != 0 {
			errs = append(errs, errors.New("cipher suites apply to lanplus only"))
		}
	default:
		errs = append(errs, fmt.Errorf("interface %q: use lanplus or lan", c.Interface))
	}
	if c.Privilege != PrivilegeAdministrator && c.Privilege != PrivilegeOperator {
		errs = append(errs, fmt.Errorf("privilege %q cannot fence: use ADMINISTRATOR or OPERATOR", c.Privilege))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	switch c.Method {
	case MethodOnOff:
	case MethodCycle:
		errs = append(errs, ErrCycleRefused)
	default:
		errs = append(errs, fmt.Errorf("method %q: use onoff", c.Method))
	}
	if len(errs) > 0 {
		return fmt.Errorf("ipmi config: %w", errors.Join(errs...))
	}
	return nil
}

// String describes the device without its credentials.
func (c Config) String() string {
	c = c.withDefaults()
	suite := "17, then 3"
	if c.CipherSuite != 0 {
		suite = fmt.Sprint(c.CipherSuite)
	}
	if c.Interface == InterfaceLan {
		suite = "none"
	}
	return fmt.Sprintf("ipmi{host: %s, port: %d, interface: %s, cipher suite: %s, privilege: %s, timeout: %v}", c.Host, c.Port, c.Interface, suite, c.Privilege, c.Timeout)
}

// GoString is String, so that %#v does not print the credentials either.
func (c Config) GoString() string { return c.String() }

func (c Config) suites() []types.CipherSuiteID {
	if c.CipherSuite == 0 {
		return autoSuites
	}
	return []types.CipherSuiteID{types.CipherSuiteID(c.CipherSuite)}
}

func (c Config) privilegeLevel() types.PrivilegeLevel {
	if c.Privilege == PrivilegeOperator {
		return types.PrivilegeLevelOperator
	}
	return types.PrivilegeLevelAdministrator
}
