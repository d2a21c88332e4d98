package ipmi

import (
	"context"
	"time"

	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/handlers"
	"github.com/bougou/go-ipmi/pkg/types"
)

// record is the middleware that keeps every dispatched command: its name,
// the session's user name, the chassis control action and the completion
// code. Request data is never kept, so no password (Set User Password, a
// v1.5 auth code) reaches the record.
func (s *Simulator) record(next handlers.Handler) handlers.Handler {
	return handlers.HandlerFunc(func(ctx context.Context, hctx *handlers.HandlerContext, req []byte) ([]byte, types.CompletionCode, error) {
		c := Command{At: time.Now(), Name: hctx.Command.Name, NetFn: uint8(hctx.Command.NetFn), Cmd: hctx.Command.ID}
		if hctx.User != nil {
			c.User = hctx.User.Name
		}
		if hctx.Command.NetFn == types.NetFnChassisRequest && hctx.Command.ID == types.CommandChassisControl.ID && len(req) > 0 {
			c.Action = chassisAction(chassis.ChassisControl(req[0] & 0x0F))
		}
		resp, cc, err := next.Handle(ctx, hctx, req)
		c.CompletionCode = uint8(cc)
		if err != nil && cc == types.CodeOK {
			c.CompletionCode = uint8(types.CodeUnspecifiedError)
		}
		s.mu.Lock()
		s.commands = append(s.commands, c)
		s.mu.Unlock()
		return resp, cc, err
	})
}

func chassisAction(a chassis.ChassisControl) string {
	switch a {
	case chassis.ChassisControlPowerDown:
		return "power down"
	case chassis.ChassisControlPowerUp:
		return "power up"
	case chassis.ChassisControlPowerCycle:
		return "power cycle"
	case chassis.ChassisControlHardReset:
		return "hard reset"
	case chassis.ChassisControlDiagnosticInterrupt:
		return "pulse diagnostic interrupt"
	case chassis.ChassisControlSoftShutdown:
		return "soft shutdown"
	}
	return "unknown"
}
