// Package fencingreq reads FencingRequests the same way in every component:
// which phases are terminal, and when the attempts prove a node fenced. It
// is a leaf (API types only) so that fenceline-controller, which marks a
// request Fenced and then lets the node's volumes go, and
// fenceline-fence-agent, which stops fencing once a level is proven, can
// never disagree on what "proven" means.
package fencingreq

import (
	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// Terminal reports whether a request in phase p is over: Recovered, Failed
// or Cancelled. Fenced and Recovering are not: the node is still out of
// service and the request still owns its taints.
func Terminal(p fencingv1alpha1.FencingPhase) bool {
	switch p {
	case fencingv1alpha1.FencingPhaseRecovered, fencingv1alpha1.FencingPhaseFailed, fencingv1alpha1.FencingPhaseCancelled:
		return true
	}
	return false
}

// ProvenLevel returns the first level of levels (in the order given, which
// the API keeps ascending) for which every FenceClass has an attempt of that
// level with result Succeeded and a read-back power state of Off. That is
// the only proof that a node is fenced: an accepted request or an exit code
// is not. A level with no class proves nothing.
func ProvenLevel(attempts []fencingv1alpha1.FenceAttempt, levels []fencingv1alpha1.FenceLevel) (int32, bool) {
	for _, l := range levels {
		if len(l.FenceClassNames) == 0 {
			continue
		}
		all := true
		for _, class := range l.FenceClassNames {
			if !verifiedOff(attempts, l.Index, class) {
				all = false
				break
			}
		}
		if all {
			return l.Index, true
		}
	}
	return 0, false
}

// verifiedOff reports whether some attempt of the class at the level
// succeeded with the power read back Off.
func verifiedOff(attempts []fencingv1alpha1.FenceAttempt, level int32, class string) bool {
	for _, a := range attempts {
		if a.Level == level && a.FenceClass == class && a.Result == fencingv1alpha1.FenceAttemptSucceeded &&
			a.VerifiedPowerState == string(fencingv1alpha1.PowerStateOff) {
			return true
		}
	}
	return false
}
