// Package devices builds the power.Device of one FenceTarget endpoint from
// its FenceClass and its credentials Secret. Each method has one
// constructor in the Constructors table; adding a method is adding its
// entry. Building a device never contacts it.
//
// The credentials Secret holds the keys "username" and "password" (both
// required, non-empty) and, for Redfish, an optional "ca.crt": PEM
// certificates the BMC's certificate must chain to. No error of this
// package carries a credential.
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

// Credentials are what a Secret gives a device.
type Credentials struct {
	Username, Password string
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

// Constructors maps each supported method to its constructor. A method
// without an entry is an ErrInvalidConfiguration.
var Constructors = map[fencingv1alpha1.FenceMethod]Constructor{
	fencingv1alpha1.FenceMethodRedfish: newRedfish,
	fencingv1alpha1.FenceMethodIPMI:    newIPMI,
	fencingv1alpha1.FenceMethodExec:    newExec,
}

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
	newDevice, ok := Constructors[class.Spec.Method]
	if !ok {
		return nil, fmt.Errorf("%w: FenceClass %q: method %q is not supported by this fence agent", ErrInvalidConfiguration, class.Name, class.Spec.Method)
	}
	ref, err := SecretRef(class, ep)
	if err != nil {
		return nil, err
	}
	creds, err := credentials(ref, secret)
	if err != nil {
		return nil, err
	}
	d, err := newDevice(Input{Class: class, Endpoint: ep, Credentials: creds, Timeout: PowerOptions(class).ActionTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: FenceClass %q, address %q: %w", ErrInvalidConfiguration, class.Name, ep.Address, err)
	}
	return d, nil
}

// checkSettings rejects settings of another method than the class's (the
// CRD's CEL rules do too; a class written before them, or a fake client,
// does not go through them).
func checkSettings(c *fencingv1alpha1.FenceClass) error {
	s, m := c.Spec, c.Spec.Method
	switch {
	case s.Redfish != nil && m != fencingv1alpha1.FenceMethodRedfish,
		s.IPMI != nil && m != fencingv1alpha1.FenceMethodIPMI,
		s.Exec != nil && m != fencingv1alpha1.FenceMethodExec:
		return fmt.Errorf("%w: FenceClass %q: settings of another method than %q", ErrInvalidConfiguration, c.Name, m)
	}
	return nil
}

// credentials reads the keys of secret, the Secret ref names.
func credentials(ref *fencingv1alpha1.SecretReference, secret *corev1.Secret) (Credentials, error) {
	where := ref.Namespace + "/" + ref.Name
	if secret == nil {
		return Credentials{}, fmt.Errorf("%w: Secret %s not found", ErrCredentials, where)
	}
	var missing []string
	for _, k := range []string{UsernameKey, PasswordKey} {
		if len(secret.Data[k]) == 0 && secret.StringData[k] == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return Credentials{}, fmt.Errorf("%w: Secret %s has no (or an empty) %q", ErrCredentials, where, missing)
	}
	get := func(k string) string {
		if v, ok := secret.Data[k]; ok {
			return string(v)
		}
		return secret.StringData[k]
	}
	return Credentials{Username: get(UsernameKey), Password: get(PasswordKey), CA: secret.Data[CAKey]}, nil
}
