package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// Errors a probe can tell apart with errors.Is.
var (
	// ErrAuth: the BMC rejected the credentials (HTTP 401 or 403).
	ErrAuth = errors.New("credentials rejected")
	// ErrUnreachable: no answer from the BMC (refused, reset, timed out).
	ErrUnreachable = errors.New("BMC unreachable")
	// ErrTLS: the BMC's certificate was not trusted.
	ErrTLS = errors.New("BMC certificate not trusted")
	// ErrSystemNotFound: the BMC has no system of the configured Id.
	ErrSystemNotFound = errors.New("system not found")
	// ErrAmbiguousSystem: systemID is empty and the BMC has several systems.
	ErrAmbiguousSystem = errors.New("more than one system and no systemID")
)

// HTTPError is an error answer of the BMC. It keeps the status and the
// Redfish message IDs only, never the body, which some BMCs fill with the
// request.
type HTTPError struct {
	StatusCode int
	MessageIDs []string
}

func (e *HTTPError) Error() string {
	if len(e.MessageIDs) == 0 {
		return fmt.Sprintf("HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("HTTP %d %s (%s)", e.StatusCode, http.StatusText(e.StatusCode), strings.Join(e.MessageIDs, ", "))
}

// statusOf is the HTTP status of a BMC error answer, 0 for other errors.
func statusOf(err error) int {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	var se *schemas.Error
	if errors.As(err, &se) {
		return se.HTTPReturnedStatusCode
	}
	return 0
}

// classify turns a gofish or transport error into one that wraps the
// sentinel a caller tests for, dropping the BMC's answer body.
func classify(err error) error {
	var se *schemas.Error
	if errors.As(err, &se) && se.HTTPReturnedStatusCode != 0 {
		he := &HTTPError{StatusCode: se.HTTPReturnedStatusCode}
		if se.Code != "" {
			he.MessageIDs = append(he.MessageIDs, se.Code)
		}
		for _, m := range se.ExtendedInfos {
			if m.MessageID != "" {
				he.MessageIDs = append(he.MessageIDs, m.MessageID)
			}
		}
		if he.StatusCode == http.StatusUnauthorized || he.StatusCode == http.StatusForbidden {
			return fmt.Errorf("%w: %w", ErrAuth, he)
		}
		return he
	}
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		return fmt.Errorf("%w: %w", ErrTLS, err)
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: no answer in time: %w", ErrUnreachable, err)
	}
	var netErr net.Error
	var urlErr *url.Error
	if errors.As(err, &netErr) || errors.As(err, &urlErr) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}

// sentinels are the errors a redacted error still matches.
var sentinels = []error{ErrAuth, ErrUnreachable, ErrTLS, ErrSystemNotFound, ErrAmbiguousSystem, context.Canceled, context.DeadlineExceeded}

// redactedError is an error whose text had a credential in it. It matches
// the sentinels the original matched, and unwraps to nothing else, so the
// original text cannot be reached.
type redactedError struct {
	msg   string
	kinds []error
	he    *HTTPError
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Unwrap() []error {
	if e.he != nil {
		return append(e.kinds, e.he)
	}
	return e.kinds
}

// redact returns err unless its text holds one of the secrets; then it
// returns the text with the secrets masked.
func redact(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg, hit := err.Error(), false
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			msg, hit = strings.ReplaceAll(msg, s, "***"), true
		}
	}
	if !hit {
		return err
	}
	r := &redactedError{msg: msg}
	for _, k := range sentinels {
		if errors.Is(err, k) {
			r.kinds = append(r.kinds, k)
		}
	}
	var he *HTTPError
	if errors.As(err, &he) {
		r.he = &HTTPError{StatusCode: he.StatusCode}
		for _, id := range he.MessageIDs {
			for _, s := range secrets {
				if s != "" {
					id = strings.ReplaceAll(id, s, "***")
				}
			}
			r.he.MessageIDs = append(r.he.MessageIDs, id)
		}
	}
	return r
}

// secrets are the strings no error of d may carry: the password and the
// basic-auth header value made of it.
func (c *Config) secrets() []string {
	if c.Password == "" {
		return nil
	}
	basic := base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))
	return []string{basic, c.Password}
}
