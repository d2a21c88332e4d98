// Package devices builds the power.Device of one FenceTarget endpoint from
// its FenceClass and its credentials Secret. Each method is one entry of
// Methods (its settings, credentials, constructor and error reasons);
// adding a method is adding its entry and its API constant. Building a
// device never contacts it.
//
// The credentials Secret holds what the method's CredentialKind names:
// "username" and "password", or "token" (required, non-empty) and, for
// Redfish, an optional "ca.crt": PEM certificates the BMC's certificate
// must chain to. No error of this package carries a credential.
package devices

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// The keys of a credentials Secret.
const (
	UsernameKey = "username"
	PasswordKey = "password"
	// TokenKey holds a bearer token, for a method of kind Token.
	TokenKey = "token"
	// CAKey holds PEM CA certificates for a Redfish BMC's TLS certificate.
	CAKey = "ca.crt"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrInvalidConfiguration: the FenceClass, the endpoint or their
	// combination cannot make a device (missing class, mismatch, bad
	// settings, unknown method).
	ErrInvalidConfiguration = errors.New("invalid fence configuration")
	// ErrCredentials: the credentials Secret is missing or incomplete.
	ErrCredentials = errors.New("fence credentials missing")
)

// Credentials are what a Secret gives a device: the fields of its method's
// CredentialKind are set.
type Credentials struct {
	Username, Password string
	Token              string
	// CA is the optional PEM bundle of the "ca.crt" key.
	CA []byte
}

// String keeps the credentials out of any %v.
func (Credentials) String() string { return "Credentials{***}" }

// GoString keeps the credentials out of %#v.
func (c Credentials) GoString() string { return c.String() }

// Input is what a constructor builds a device from. Class and Endpoint are
// already checked to belong together.
type Input struct {
	Class       *fencingv1alpha1.FenceClass
	Endpoint    fencingv1alpha1.FenceEndpoint
	Credentials Credentials
	// Timeout bounds each call of the device (the class's action timeout).
	Timeout time.Duration
}

// Constructor builds the device of one method. Its errors must not carry
// the credentials.
type Constructor func(Input) (power.Device, error)

// DefaultActionTimeout is the per-call bound when the class sets none (the
// CRD's default).
const DefaultActionTimeout = 10 * time.Second

// SecretRef is the Secret an endpoint's credentials come from: the
// endpoint's own, else the class's.
func SecretRef(class *fencingv1alpha1.FenceClass, ep fencingv1alpha1.FenceEndpoint) (*fencingv1alpha1.SecretReference, error) {
	if ep.CredentialsSecretRef != nil {
		return ep.CredentialsSecretRef, nil
	}
	if class != nil && class.Spec.CredentialsSecretRef != nil {
		return class.Spec.CredentialsSecretRef, nil
	}
	return nil, fmt.Errorf("%w: neither the endpoint nor FenceClass %q names a credentials Secret", ErrCredentials, ep.FenceClassName)
}

// Build returns the device of endpoint ep of class, with the credentials
// of secret (the one SecretRef names). class or secret nil means it was not
// found.
func Build(class *fencingv1alpha1.FenceClass, ep fencingv1alpha1.FenceEndpoint, secret *corev1.Secret) (power.Device, error) {
	if class == nil {
		return nil, fmt.Errorf("%w: FenceClass %q not found", ErrInvalidConfiguration, ep.FenceClassName)
	}
	if class.Name != ep.FenceClassName {
		return nil, fmt.Errorf("%w: endpoint is for FenceClass %q, not %q", ErrInvalidConfiguration, ep.FenceClassName, class.Name)
	}
	if err := checkSettings(class); err != nil {
		return nil, err
	}
	method, ok := MethodOf(class.Spec.Method)
	if !ok {
		return nil, fmt.Errorf("%w: FenceClass %q: method %q is not supported by this fence agent", ErrInvalidConfiguration, class.Name, class.Spec.Method)
	}
	ref, err := SecretRef(class, ep)
	if err != nil {
		return nil, err
	}
	creds, err := credentials(method.Credentials, ref, secret)
	if err != nil {
		return nil, err
	}
	d, err := method.New(Input{Class: class, Endpoint: ep, Credentials: creds, Timeout: PowerOptions(class).ActionTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: FenceClass %q, address %q: %w", ErrInvalidConfiguration, class.Name, ep.Address, err)
	}
	return d, nil
}

// checkSettings rejects settings of another method than the class's (the
// CRD's CEL rules do too; a class written before them, or a fake client,
// does not go through them).
func checkSettings(c *fencingv1alpha1.FenceClass) error {
	for _, m := range Methods {
		if m.Name != c.Spec.Method && m.HasSettings(&c.Spec) {
			return fmt.Errorf("%w: FenceClass %q: settings of another method (%s) than its method %q", ErrInvalidConfiguration, c.Name, m.Name, c.Spec.Method)
		}
	}
	return nil
}

// credentials reads the keys of kind from secret, the Secret ref names.
func credentials(kind CredentialKind, ref *fencingv1alpha1.SecretReference, secret *corev1.Secret) (Credentials, error) {
	where := ref.Namespace + "/" + ref.Name
	if secret == nil {
		return Credentials{}, fmt.Errorf("%w: Secret %s not found", ErrCredentials, where)
	}
	get := func(k string) string {
		if v, ok := secret.Data[k]; ok {
			return string(v)
		}
		return secret.StringData[k]
	}
	var missing []string
	for _, k := range kind.required() {
		if get(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return Credentials{}, fmt.Errorf("%w: Secret %s has no (or an empty) %q", ErrCredentials, where, missing)
	}
	c := Credentials{CA: secret.Data[CAKey]}
	switch kind {
	case Token:
		c.Token = get(TokenKey)
	default:
		c.Username, c.Password = get(UsernameKey), get(PasswordKey)
	}
	return c, nil
}
