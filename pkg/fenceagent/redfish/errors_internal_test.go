package redfish

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stmcginnis/gofish/schemas"
)

// TestErrorsCarryNoCredentials: a BMC that echoes the request in its error
// body, or any error text holding the password, never reaches a caller
// with the password in it, and the error still matches its sentinel.
func TestErrorsCarryNoCredentials(t *testing.T) {
	cfg := Config{Username: "admin", Password: "Echo-S3cret"}
	echo := []byte(`{"error":{"code":"Base.1.8.GeneralError","message":"bad login admin/Echo-S3cret",` +
		`"@Message.ExtendedInfo":[{"MessageId":"Vendor.Echo-S3cret"}]}}`)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"401 body echoing the password", schemas.ConstructError(401, echo), ErrAuth},
		{"500 body echoing the password", schemas.ConstructError(500, echo), nil},
		{"plain error text", fmt.Errorf("%w: token for admin:Echo-S3cret", ErrUnreachable), ErrUnreachable},
		{"context error", fmt.Errorf("Echo-S3cret: %w", errors.Join(ErrUnreachable, errors.New("x"))), ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := redact(fmt.Errorf("redfish off: %w", classify(tc.err)), cfg.secrets()...)
			if strings.Contains(err.Error(), cfg.Password) {
				t.Fatalf("error carries the password: %v", err)
			}
			var he *HTTPError
			if errors.As(err, &he) && strings.Contains(he.Error(), cfg.Password) {
				t.Fatalf("HTTPError carries the password: %v", he)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v no longer matches %v", err, tc.want)
			}
		})
	}
}

func TestClassifyKeepsStatus(t *testing.T) {
	for _, tc := range []struct {
		status   int
		wantAuth bool
	}{{401, true}, {403, true}, {404, false}, {409, false}, {500, false}, {503, false}} {
		err := classify(schemas.ConstructError(tc.status, []byte(`{}`)))
		if errors.Is(err, ErrAuth) != tc.wantAuth || statusOf(err) != tc.status {
			t.Errorf("status %d: %v (auth %v, status %d)", tc.status, err, errors.Is(err, ErrAuth), statusOf(err))
		}
	}
}
