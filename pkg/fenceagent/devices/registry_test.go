package devices

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// TestMethodsMatchTheCRD holds the API server's view of the methods (the
// CRD generated from api/fencing's markers) to Methods: the allowed values
// of spec.method, the power methods for which verify None is refused, and
// one "settings only with their method" rule per method.
func TestMethodsMatchTheCRD(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/crds/fenceline.io_fenceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	var enum, power, names []string
	for _, v := range spec.Properties["method"].Enum {
		enum = append(enum, strings.Trim(string(v.Raw), `"`))
	}
	for _, m := range Methods {
		names = append(names, string(m.Name))
		if m.Power {
			power = append(power, string(m.Name))
		}
	}
	if !slices.Equal(enum, names) {
		t.Errorf("the CRD allows methods %v, the agent supports %v", enum, names)
	}
	inList := regexp.MustCompile(`self\.method in \[([^]]*)\]`)
	var rules []string
	for _, r := range spec.XValidations {
		rules = append(rules, r.Rule)
		if m := inList.FindStringSubmatch(r.Rule); m != nil && strings.Contains(r.Rule, "None") {
			var got []string
			for _, q := range strings.Split(m[1], ",") {
				got = append(got, strings.Trim(strings.TrimSpace(q), "'"))
			}
			if !slices.Equal(got, power) {
				t.Errorf("the CRD refuses verify None for %v, the power methods are %v", got, power)
			}
		}
	}
	for _, m := range Methods {
		block := strings.ToLower(string(m.Name))
		if !slices.ContainsFunc(rules, func(r string) bool {
			return strings.Contains(r, "has(self."+block+")") && strings.Contains(r, "'"+string(m.Name)+"'")
		}) {
			t.Errorf("no CRD rule keeps the %s settings to method %s", block, m.Name)
		}
	}
}

// TestCredentialKinds: each kind reads its own keys and refuses a Secret
// without them.
func TestCredentialKinds(t *testing.T) {
	ref := &fencingv1alpha1.SecretReference{Namespace: "fenceline-system", Name: "bmc"}
	tests := []struct {
		name    string
		kind    CredentialKind
		data    map[string]string
		want    Credentials
		wantErr string
	}{
		{"user and password", UserPassword, map[string]string{UsernameKey: "admin", PasswordKey: testPassword}, Credentials{Username: "admin", Password: testPassword}, ""},
		{"user and password, CA", UserPassword, map[string]string{UsernameKey: "admin", PasswordKey: testPassword, CAKey: "pem"}, Credentials{Username: "admin", Password: testPassword, CA: []byte("pem")}, ""},
		{"user without password", UserPassword, map[string]string{UsernameKey: "admin", TokenKey: "t0ken"}, Credentials{}, `"password"`},
		{"token", Token, map[string]string{TokenKey: "t0ken"}, Credentials{Token: "t0ken"}, ""},
		{"token missing", Token, map[string]string{UsernameKey: "admin", PasswordKey: testPassword}, Credentials{}, `"token"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := credentials(tc.kind, ref, secret(tc.data))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrCredentials) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("credentials: %v, want ErrCredentials naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Username != tc.want.Username || got.Password != tc.want.Password || got.Token != tc.want.Token || string(got.CA) != string(tc.want.CA) {
				t.Errorf("credentials = %#v, want the kind's keys only", []string{got.Username, got.Password, got.Token, string(got.CA)})
			}
		})
	}
}

// TestScrubMasksEveryCredential: the password and the token of the Secret
// are masked in an error's text, and errors.Is still sees through it.
func TestScrubMasksEveryCredential(t *testing.T) {
	s := secret(map[string]string{UsernameKey: "admin", PasswordKey: testPassword, TokenKey: "tok-3n"})
	err := Scrub(fmt.Errorf("login with %s or tok-3n: %w", testPassword, ErrCredentials), s)
	if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "tok-3n") || !errors.Is(err, ErrCredentials) {
		t.Errorf("Scrub = %v (errors.Is %v)", err, errors.Is(err, ErrCredentials))
	}
}
