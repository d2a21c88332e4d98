package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/names"
)

// Ask is what fence or unfence asked node-fencing to do. The plugin writes
// only the ask (a FencingRequest, or annotations on one or on the Node);
// node-fencing carries it out, each write re-decided on fresh data.
type Ask struct {
	// Node is the node the ask is about.
	Node string
	// Object carries the ask: fencingrequest/NAME or node/NAME.
	Object string
	// Asked says what was written and who acts on it.
	Asked string
	// Doing is what node-fencing is to do, for messages ("unfence node x").
	Doing string
	// Watch is a command that follows it.
	Watch string
	// done reports, on fresh data, whether the ask was carried out; an
	// error ends the wait (the request failed, was deleted, ...).
	done func(*fenceState) (bool, error)
}

// pollInterval is how often a wait reads the node's state again.
const pollInterval = time.Second

// ErrTimeout is wrapped by a wait that ran out of time: the ask stays and
// node-fencing may still carry it out.
var ErrTimeout = errors.New("timed out")

// Wait reads the node's state every second until node-fencing has carried
// out the ask, the ask failed, or timeout passed. On a timeout the error
// says what node-fencing's decision is now and how to follow the ask. now
// is the clock decisions are made for.
func Wait(ctx context.Context, c Clients, a *Ask, timeout time.Duration, now func() time.Time) error {
	var last *fenceState
	var failed error
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		st, err := readFenceState(ctx, c, a.Node, now())
		if err != nil {
			return false, err
		}
		last = st
		ok, err := a.done(st)
		failed = err
		return ok, err
	})
	switch {
	case err == nil:
		return nil
	case failed != nil:
		return failed
	case last != nil && (errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err)):
		d := nodefencing.Decide(last.input)
		return fmt.Errorf("%w after %s waiting for node-fencing to %s; its decision now: %s: %s. The ask stays on %s and is carried out when the decision allows; follow it with %s",
			ErrTimeout, timeout, a.Doing, d.Word(), d.Why, a.Object, a.Watch)
	}
	return err
}

// askPatch is the merge patch that puts the unfence ask on an object:
// who asks and what they verified (a verification of an earlier ask is
// removed when none is given). uid, when set, makes the patch fail on an
// object recreated under the same name.
func askPatch(uid types.UID, requester, verified string) ([]byte, error) {
	var v any
	if verified != "" {
		v = verified
	}
	meta := map[string]any{"annotations": map[string]any{
		names.UnfenceAnnotation:         requester,
		names.UnfenceVerifiedAnnotation: v,
	}}
	if uid != "" {
		meta["uid"] = uid
	}
	return json.Marshal(map[string]any{"metadata": meta})
}
