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

// Scrub masks the Secret's password and token in err's text: the methods
// already keep credentials out of their errors, this is the second guard
// before status, Events and logs.
func Scrub(err error, secret *corev1.Secret) error {
	if err == nil || secret == nil {
		return err
	}
	msg := err.Error()
	for _, k := range []string{PasswordKey, TokenKey} {
		v := string(secret.Data[k])
		if v == "" {
			v = secret.StringData[k]
		}
		if len(v) >= 3 {
			msg = strings.ReplaceAll(msg, v, "***")
		}
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{err: err, msg: msg}
}
