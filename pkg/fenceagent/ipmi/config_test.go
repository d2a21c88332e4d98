package ipmi

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	testUser     = "fence-operator"
	testPassword = "pw-Zq81-secret"
)

func TestValidate(t *testing.T) {
	good := Config{Host: "127.0.0.1", Username: testUser, Password: testPassword}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
		wantIs  error
	}{
		{"defaults are valid", func(*Config) {}, "", nil},
		{"lan is valid", func(c *Config) { c.Interface = "LAN" }, "", nil},
		{"suite 3", func(c *Config) { c.CipherSuite = 3 }, "", nil},
		{"suite 17", func(c *Config) { c.CipherSuite = 17 }, "", nil},
		{"operator may fence", func(c *Config) { c.Privilege = "operator" }, "", nil},
		{"cycle is refused", func(c *Config) { c.Method = MethodCycle }, "cannot be verified off", ErrCycleRefused},
		{"suite 1 has no integrity", func(c *Config) { c.CipherSuite = 1 }, "cipher suite 1 is refused", nil},
		{"suite 2 has no confidentiality", func(c *Config) { c.CipherSuite = 2 }, "cipher suite 2 is refused", nil},
		{"a cipher suite with lan", func(c *Config) { c.Interface = InterfaceLan; c.CipherSuite = 3 }, "lanplus only", nil},
		{"user privilege cannot power off", func(c *Config) { c.Privilege = "USER" }, "cannot fence", nil},
		{"unknown interface", func(c *Config) { c.Interface = "open" }, "use lanplus or lan", nil},
		{"no host", func(c *Config) { c.Host = "" }, "host is required", nil},
		{"bad port", func(c *Config) { c.Port = 70000 }, "out of range", nil},
		{"no username", func(c *Config) { c.Username = "" }, "username", nil},
		{"password over 20 bytes", func(c *Config) { c.Password = strings.Repeat("p", 21) }, "password is over", nil},
		{"password over 16 bytes on lan", func(c *Config) { c.Interface = InterfaceLan; c.Password = strings.Repeat("p", 17) }, "password is over", nil},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "negative", nil},
		{"unknown method", func(c *Config) { c.Method = "reboot" }, "use onoff", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			err := c.Validate()
			_, newErr := New(c)
			if tc.wantErr == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate() = %v, New() = %v, want nil", err, newErr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
			if newErr == nil {
				t.Fatal("New() accepted an invalid config")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Fatalf("Validate() = %v, want it to wrap %v", err, tc.wantIs)
			}
			if strings.Contains(err.Error(), c.Password) && c.Password != "" {
				t.Fatalf("Validate() error shows the password: %v", err)
			}
		})
	}
}

func TestConfigNeverPrintsCredentials(t *testing.T) {
	c := Config{Host: "bmc-1.example", Username: testUser, Password: testPassword}
	d, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{c, &c, d} {
			out := fmt.Sprintf(format, v)
			if strings.Contains(out, testPassword) || strings.Contains(out, testUser) {
				t.Errorf("Sprintf(%q, %T) = %q shows a credential", format, v, out)
			}
			if !strings.Contains(out, "bmc-1.example") {
				t.Errorf("Sprintf(%q, %T) = %q does not name the BMC", format, v, out)
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	c := Config{Host: "h", Username: testUser}.withDefaults()
	if c.Port != 623 || c.Interface != InterfaceLanplus || c.Privilege != PrivilegeAdministrator || c.Timeout != DefaultTimeout || c.Method != MethodOnOff {
		t.Fatalf("defaults = %v, want port 623, lanplus, ADMINISTRATOR, %v, onoff", c, DefaultTimeout)
	}
	if got := fmt.Sprint(c.suites()); got != "[17 3]" {
		t.Fatalf("default cipher suites = %s, want [17 3]", got)
	}
}
