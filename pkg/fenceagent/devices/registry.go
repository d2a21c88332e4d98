package devices

import (
	"errors"
	"slices"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/ipmi"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
)

// CredentialKind is what a method authenticates with, and so which keys its
// credentials Secret must hold.
type CredentialKind int

const (
	// UserPassword: the keys "username" and "password", both non-empty
	// ("ca.crt" optional).
	UserPassword CredentialKind = iota
	// Token: the key "token", non-empty ("ca.crt" optional); for an API
	// that takes a bearer token.
	Token
)

// required are the Secret keys kind needs.
func (k CredentialKind) required() []string {
	if k == Token {
		return []string{TokenKey}
	}
	return []string{UsernameKey, PasswordKey}
}

// Method is everything the agent knows of one fence method; Methods is the
// only list of them. The settings checks, the constructors and the error
// classification read it, and TestMethodsMatchTheCRD holds the CRD's
// allowed values (generated from api/fencing's markers) to it.
type Method struct {
	// Name is FenceClass spec.method.
	Name fencingv1alpha1.FenceMethod
	// Power: the method acts on power, so only a read-back power state
	// proves a fence (the CRD refuses verify None).
	Power bool
	// HasSettings reports whether a class spec carries this method's own
	// settings block.
	HasSettings func(*fencingv1alpha1.FenceClassSpec) bool
	// Credentials is what its Secret holds.
	Credentials CredentialKind
	// New builds its device.
	New Constructor
	// Reason names a condition reason for an error of its own devices, ""
	// when the error is none of its own.
	Reason func(error) string
}

// Methods are the fence methods this agent supports.
var Methods = []Method{
	{
		Name: fencingv1alpha1.FenceMethodRedfish, Power: true, Credentials: UserPassword, New: newRedfish,
		HasSettings: func(s *fencingv1alpha1.FenceClassSpec) bool { return s.Redfish != nil },
		Reason:      redfishReason,
	},
	{
		Name: fencingv1alpha1.FenceMethodIPMI, Power: true, Credentials: UserPassword, New: newIPMI,
		HasSettings: func(s *fencingv1alpha1.FenceClassSpec) bool { return s.IPMI != nil },
		Reason: func(err error) string {
			if errors.Is(err, ipmi.ErrAuth) {
				return ReasonCredentialsRejected
			}
			return ""
		},
	},
	{
		Name: fencingv1alpha1.FenceMethodExec, Power: true, Credentials: UserPassword, New: newExec,
		HasSettings: func(s *fencingv1alpha1.FenceClassSpec) bool { return s.Exec != nil },
		Reason:      func(error) string { return "" },
	},
}

// MethodOf returns the method named name.
func MethodOf(name fencingv1alpha1.FenceMethod) (Method, bool) {
	i := slices.IndexFunc(Methods, func(m Method) bool { return m.Name == name })
	if i < 0 {
		return Method{}, false
	}
	return Methods[i], true
}

func redfishReason(err error) string {
	switch {
	case errors.Is(err, redfish.ErrAuth):
		return ReasonCredentialsRejected
	case errors.Is(err, redfish.ErrTLS):
		return ReasonTLSNotTrusted
	case errors.Is(err, redfish.ErrSystemNotFound), errors.Is(err, redfish.ErrAmbiguousSystem):
		return ReasonSystemNotFound
	case errors.Is(err, redfish.ErrUnreachable):
		return ReasonUnreachable
	}
	return ""
}
