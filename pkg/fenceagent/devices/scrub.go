package devices

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// scrubbedError is err with every credential value of a Secret masked in
// its text; errors.Is still sees the original chain.
type scrubbedError struct {
	err error
	msg string
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// Scrub masks the Secret's password in err's text: the methods already
// keep credentials out of their errors, this is the second guard before
// status, Events and logs.
func Scrub(err error, secret *corev1.Secret) error {
	if err == nil || secret == nil {
		return err
	}
	pw := string(secret.Data[PasswordKey])
	if pw == "" {
		pw = secret.StringData[PasswordKey]
	}
	if len(pw) < 3 || !strings.Contains(err.Error(), pw) {
		return err
	}
	return &scrubbedError{err: err, msg: strings.ReplaceAll(err.Error(), pw, "***")}
}
