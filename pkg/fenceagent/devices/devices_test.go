package devices

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/fenceagent/exec"
	"fenceline.io/fenceline/pkg/fenceagent/ipmi"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
	"fenceline.io/fenceline/test/fenceagents"
)

const testPassword = "S3cret-Passw0rd"

// class is a FenceClass of the method whose credentials are in the Secret
// fenceline-system/bmc, its spec then changed by mutate.
func class(name string, m fencingv1alpha1.FenceMethod, mutate ...func(*fencingv1alpha1.FenceClassSpec)) *fencingv1alpha1.FenceClass {
	c := testobj.FenceClass(name, testobj.Method(m), testobj.Credentials("fenceline-system", "bmc"))
	for _, f := range mutate {
		f(&c.Spec)
	}
	return c
}

func secret(data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fenceline-system", Name: "bmc"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestBuild(t *testing.T) {
	good := secret(map[string]string{UsernameKey: "admin", PasswordKey: testPassword})
	ep := func(class, addr string) fencingv1alpha1.FenceEndpoint {
		return fencingv1alpha1.FenceEndpoint{FenceClassName: class, Address: addr}
	}
	suite := int32(3)
	tests := []struct {
		name    string
		class   *fencingv1alpha1.FenceClass
		ep      fencingv1alpha1.FenceEndpoint
		secret  *corev1.Secret
		wantErr error // nil: a device
		want    any   // the device's type
		wantMsg string
	}{
		{"redfish", class("rf", fencingv1alpha1.FenceMethodRedfish), ep("rf", "https://10.0.0.5"), good, nil, &redfish.Device{}, ""},
		{"redfish insecure, system", class("rf", fencingv1alpha1.FenceMethodRedfish, func(s *fencingv1alpha1.FenceClassSpec) {
			s.Redfish = &fencingv1alpha1.RedfishSettings{InsecureTLS: true, ResetType: "ForceOff"}
		}), fencingv1alpha1.FenceEndpoint{FenceClassName: "rf", Address: "bmc:8443", SystemID: "1"}, good, nil, &redfish.Device{}, ""},
		{"ipmi host", class("ip", fencingv1alpha1.FenceMethodIPMI), ep("ip", "10.0.0.6"), good, nil, &ipmi.Device{}, ""},
		{"ipmi host:port, suite 3", class("ip", fencingv1alpha1.FenceMethodIPMI, func(s *fencingv1alpha1.FenceClassSpec) {
			s.IPMI = &fencingv1alpha1.IPMISettings{Interface: "lanplus", CipherSuite: &suite, Privilege: "OPERATOR"}
		}), ep("ip", "[fd00::6]:6230"), good, nil, &ipmi.Device{}, ""},
		{"endpoint's own secret", class("ip", fencingv1alpha1.FenceMethodIPMI, func(s *fencingv1alpha1.FenceClassSpec) { s.CredentialsSecretRef = nil }),
			fencingv1alpha1.FenceEndpoint{FenceClassName: "ip", Address: "h", CredentialsSecretRef: &fencingv1alpha1.SecretReference{Namespace: "fenceline-system", Name: "bmc"}}, good, nil, &ipmi.Device{}, ""},
		{"missing class", nil, ep("rf", "https://h"), good, ErrInvalidConfiguration, nil, `FenceClass "rf" not found`},
		{"class mismatch", class("ip", fencingv1alpha1.FenceMethodIPMI), ep("rf", "h"), good, ErrInvalidConfiguration, nil, `endpoint is for FenceClass "rf", not "ip"`},
		{"settings of another method", class("rf", fencingv1alpha1.FenceMethodRedfish, func(s *fencingv1alpha1.FenceClassSpec) {
			s.IPMI = &fencingv1alpha1.IPMISettings{}
		}), ep("rf", "https://h"), good, ErrInvalidConfiguration, nil, "settings of another method"},
		{"exec: a reserved option", class("ex", fencingv1alpha1.FenceMethodExec, func(s *fencingv1alpha1.FenceClassSpec) {
			s.Exec = &fencingv1alpha1.ExecSettings{Agent: "fence_ipmilan", Args: map[string]string{"password": "x"}}
		}), ep("ex", "h"), good, ErrInvalidConfiguration, nil, "password"},
		{"exec: systemID does not apply", class("ex", fencingv1alpha1.FenceMethodExec, func(s *fencingv1alpha1.FenceClassSpec) {
			s.Exec = &fencingv1alpha1.ExecSettings{Agent: "fence_ipmilan"}
		}), fencingv1alpha1.FenceEndpoint{FenceClassName: "ex", Address: "h", SystemID: "1"}, good, ErrInvalidConfiguration, nil, "systemID does not apply"},
		{"exec: no settings", class("ex", fencingv1alpha1.FenceMethodExec), ep("ex", "h"), good, ErrInvalidConfiguration, nil, "needs its exec settings"},
		{"no secret named", class("rf", fencingv1alpha1.FenceMethodRedfish, func(s *fencingv1alpha1.FenceClassSpec) { s.CredentialsSecretRef = nil }),
			ep("rf", "https://h"), good, ErrCredentials, nil, "names a credentials Secret"},
		{"missing secret", class("rf", fencingv1alpha1.FenceMethodRedfish), ep("rf", "https://h"), nil, ErrCredentials, nil, "Secret fenceline-system/bmc not found"},
		{"partial secret", class("rf", fencingv1alpha1.FenceMethodRedfish), ep("rf", "https://h"), secret(map[string]string{UsernameKey: "admin"}), ErrCredentials, nil, `"password"`},
		{"bad CA", class("rf", fencingv1alpha1.FenceMethodRedfish), ep("rf", "https://h"),
			secret(map[string]string{UsernameKey: "admin", PasswordKey: testPassword, CAKey: "junk"}), ErrInvalidConfiguration, nil, "no PEM certificate"},
		{"redfish http refused", class("rf", fencingv1alpha1.FenceMethodRedfish), ep("rf", "http://h"), good, ErrInvalidConfiguration, nil, "only https"},
		{"ipmi USER privilege", class("ip", fencingv1alpha1.FenceMethodIPMI, func(s *fencingv1alpha1.FenceClassSpec) {
			s.IPMI = &fencingv1alpha1.IPMISettings{Privilege: "USER"}
		}), ep("ip", "h"), good, ErrInvalidConfiguration, nil, `privilege "USER" cannot fence`},
		{"ipmi bad port", class("ip", fencingv1alpha1.FenceMethodIPMI), ep("ip", "h:99999"), good, ErrInvalidConfiguration, nil, "bad port"},
		{"ipmi with plug", class("ip", fencingv1alpha1.FenceMethodIPMI), fencingv1alpha1.FenceEndpoint{FenceClassName: "ip", Address: "h", Plug: "p"}, good, ErrInvalidConfiguration, nil, "do not apply"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Build(tc.class, tc.ep, tc.secret)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				if fmt.Sprintf("%T", d) != fmt.Sprintf("%T", tc.want) {
					t.Errorf("device %T, want %T", d, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Build: %v, want %v mentioning %q", err, tc.wantErr, tc.wantMsg)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error carries the password: %v", err)
			}
		})
	}
}

// TestBuildExec builds a device for a fence agent that is installed; the
// table above covers the refusals, which need none.
func TestBuildExec(t *testing.T) {
	fenceagents.Require(t, "fence_ipmilan")
	c := class("ex", fencingv1alpha1.FenceMethodExec, func(s *fencingv1alpha1.FenceClassSpec) {
		s.Exec = &fencingv1alpha1.ExecSettings{Agent: "fence_ipmilan", Args: map[string]string{"lanplus": "1"}}
	})
	d, err := Build(c, fencingv1alpha1.FenceEndpoint{FenceClassName: "ex", Address: "10.0.0.7"}, secret(map[string]string{UsernameKey: "admin", PasswordKey: testPassword}))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if _, ok := d.(*exec.Device); !ok {
		t.Fatalf("device %T, want *exec.Device", d)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ReasonReachable},
		{fmt.Errorf("x: %w", ErrCredentials), ReasonCredentialsMissing},
		{fmt.Errorf("x: %w", ErrInvalidConfiguration), ReasonInvalidConfiguration},
		{fmt.Errorf("x: %w", redfish.ErrAuth), ReasonCredentialsRejected},
		{fmt.Errorf("x: %w", ipmi.ErrAuth), ReasonCredentialsRejected},
		{fmt.Errorf("x: %w", redfish.ErrUnreachable), ReasonUnreachable},
		{fmt.Errorf("x: %w", redfish.ErrTLS), ReasonTLSNotTrusted},
		{fmt.Errorf("x: %w", redfish.ErrSystemNotFound), ReasonSystemNotFound},
		{errors.New("odd"), ReasonProbeFailed},
	}
	for _, tc := range tests {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestCredentialsNotPrinted(t *testing.T) {
	c := Credentials{Username: "admin", Password: testPassword}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c)} {
		if strings.Contains(s, testPassword) {
			t.Errorf("printed credentials: %s", s)
		}
	}
}
