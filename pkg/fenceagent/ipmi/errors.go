package ipmi

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"
)

// ErrAuth is wrapped by the errors of a BMC that refused the credentials
// or the privilege level: retrying with the same secret cannot help, and
// the FenceTarget's probe should say so before a node needs fencing.
var ErrAuth = errors.New("ipmi: the BMC refused the credentials or the privilege level")

// phase is where in a call an error arose: the same completion code means
// a refused user while a session is set up and something else afterwards.
type phase int

const (
	phaseConnect phase = iota
	phaseCommand
)

type phaseError struct {
	phase phase
	err   error
}

func (e *phaseError) Error() string { return e.err.Error() }
func (e *phaseError) Unwrap() error { return e.err }

// RMCP+ status codes (IPMI v2.0 Table 13-15) that refuse the user.
var authStatus = map[types.RmcpStatusCode]bool{
	types.RmcpStatusCodeInvalidRole:                true,
	types.RmcpStatusCodeUnauthorizedRoleOfPriLevel: true,
	types.RmcpStatusCodeUnauthorizedName:           true,
	types.RmcpStatusCodeUnauthorizedGUID:           true,
	types.RmcpStatusCodeInvalidIntegrityCheckValue: true,
}

// Completion codes that refuse the user while a session is set up: Get
// Session Challenge's invalid user name (81h) and null user disabled (82h),
// Set Session Privilege Level's level not available or over the limit
// (80h, 81h), Activate Session's privilege over the limit (86h) and its
// invalid session ID (85h), which is how a v1.5 BMC (go-ipmi's among them)
// answers an auth code made with the wrong password right after it handed
// out the challenge. 81h and 82h also mean "no session slot" for Activate
// Session, so the command that answered is checked too.
var connectAuthCodes = map[string][]types.CompletionCode{
	"GetSessionChallenge":      {0x81, 0x82},
	"SetSessionPrivilegeLevel": {0x80, 0x81},
	"ActivateSession":          {0x85, 0x86},
}

// isAuth reports whether err is the BMC refusing the user.
func isAuth(err error) bool {
	if errors.Is(err, client.ErrRAKPAuthentication) {
		return true
	}
	var st *types.RmcpStatusError
	if errors.As(err, &st) && authStatus[st.StatusCode()] {
		return true
	}
	// go-ipmi (pinned version) formats the per-cipher-suite errors of a
	// failed RMCP+ setup with %v, which drops them from the chain: match
	// their text.
	msg := err.Error()
	if strings.Contains(msg, client.ErrRAKPAuthentication.Error()) {
		return true
	}
	for code := range authStatus {
		if strings.Contains(msg, types.NewRmcpStatusError(code).Error()) {
			return true
		}
	}
	var re *types.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	if re.CompletionCode() == types.CodeInsufficientPrivilege {
		return true
	}
	var pe *phaseError
	if !errors.As(err, &pe) || pe.phase != phaseConnect {
		return false
	}
	// go-ipmi names the failed setup step in its message (pinned version).
	for step, codes := range connectAuthCodes {
		if strings.Contains(msg, step) {
			for _, cc := range codes {
				if re.CompletionCode() == cc {
					return true
				}
			}
		}
	}
	return false
}

// wrap names the operation and the BMC, marks refused credentials with
// ErrAuth and keeps the credentials out of the message.
func (d *Device) wrap(op string, err error) error {
	where := net.JoinHostPort(d.cfg.Host, strconv.Itoa(d.cfg.Port))
	if isAuth(err) {
		err = fmt.Errorf("ipmi %s at %s: %w: %w", op, where, ErrAuth, err)
	} else {
		err = fmt.Errorf("ipmi %s at %s: %w", op, where, err)
	}
	return &scrubbed{err: err, msg: scrub(err.Error(), d.cfg.Password, d.cfg.Username)}
}

// scrub masks the secrets in msg; strings under 3 bytes are left alone, as
// masking them would mangle ordinary words.
func scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}

// scrubbed is an error whose message has the credentials masked, in case a
// library puts them in its own; errors.Is and errors.As see through it.
type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string { return e.msg }

// GoString keeps %#v from printing the wrapped chain.
func (e *scrubbed) GoString() string { return e.msg }

func (e *scrubbed) Unwrap() error { return e.err }
