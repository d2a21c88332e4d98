package redfish

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stmcginnis/gofish/schemas"
)

// DefaultTimeout bounds one Status, Off or On call when Config.Timeout is
// zero: the fence agents' default power timeout.
const DefaultTimeout = 10 * time.Second

// logoutTimeout bounds the session delete that ends every call, which runs
// even when the call's context is done.
const logoutTimeout = 5 * time.Second

// Config is one Redfish system's fence device.
type Config struct {
	// Address is the BMC: an https URL (https://bmc:8443) or host[:port];
	// a path of /redfish/v1 is accepted and ignored.
	Address string
	// SystemID is the ComputerSystem's Id ("1", "System.Embedded.1") or
	// its full URI. Empty means the one system of the BMC; a BMC with more
	// than one system then needs it.
	SystemID string
	// Username and Password authenticate to the BMC. They are never logged
	// nor put in errors.
	Username, Password string
	// InsecureTLS skips verification of the BMC's certificate.
	InsecureTLS bool
	// RootCAs, when set, are the CAs the BMC's certificate must chain to;
	// nil means the system's.
	RootCAs *x509.CertPool
	// ResetType is the Reset sent by Off: ForceOff (the default) or, for a
	// BMC without it, PushPowerButton. On always sends On.
	ResetType string
	// Timeout bounds each Status, Off or On call, every request of it
	// included; zero means DefaultTimeout.
	Timeout time.Duration
	// BasicAuth sends the credentials with every request instead of
	// opening a session, for BMCs without a SessionService.
	BasicAuth bool
}

// offResetTypes are the reset types Off may send: those that cut power
// without waiting for the operating system.
var offResetTypes = map[string]bool{
	string(schemas.ForceOffResetType):        true,
	string(schemas.PushPowerButtonResetType): true,
}

// endpoint validates c and returns the BMC's base URL, without a path.
func (c *Config) endpoint() (string, error) {
	addr := strings.TrimSpace(c.Address)
	if addr == "" {
		return "", fmt.Errorf("redfish: address is empty")
	}
	if !strings.Contains(addr, "://") {
		addr = "https://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", fmt.Errorf("redfish: address %q: %w", c.Address, err)
	}
	switch {
	case u.Scheme != "https":
		return "", fmt.Errorf("redfish: address %q: only https is supported, credentials would cross in clear text", u.Redacted())
	case u.User != nil:
		return "", fmt.Errorf("redfish: address %q: credentials go in the Secret, not the address", u.Redacted())
	case u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("redfish: address %q: want https://host[:port] or host[:port]", u.Redacted())
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != "/redfish/v1" {
		return "", fmt.Errorf("redfish: address %q: unexpected path %q", u.Redacted(), u.Path)
	}
	if _, port, err := net.SplitHostPort(u.Host); err == nil && port == "" {
		return "", fmt.Errorf("redfish: address %q: empty port", u.Redacted())
	}
	return "https://" + u.Host, nil
}

func (c *Config) validate() error {
	if c.Username == "" {
		return fmt.Errorf("redfish: username is empty")
	}
	if c.ResetType == "" {
		c.ResetType = string(schemas.ForceOffResetType)
	}
	if !offResetTypes[c.ResetType] {
		return fmt.Errorf("redfish: reset type %q cannot fence: want ForceOff or PushPowerButton", c.ResetType)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("redfish: negative timeout %v", c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return nil
}

// httpClient is the one client of a Device: direct connections (a BMC sits
// on a management network, not behind the cluster's proxy), the TLS
// settings of c, and a bound on every request.
func (c *Config) httpClient() *http.Client {
	base := http.DefaultTransport.(*http.Transport)
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.RootCAs, InsecureSkipVerify: c.InsecureTLS}, //nolint:gosec // an explicit, documented choice of the FenceClass
		TLSHandshakeTimeout:   c.Timeout,
		ResponseHeaderTimeout: c.Timeout,
		IdleConnTimeout:       base.IdleConnTimeout,
		MaxIdleConnsPerHost:   2,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Transport: tr, Timeout: c.Timeout}
}
