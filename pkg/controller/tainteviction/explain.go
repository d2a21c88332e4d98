package tainteviction

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/controller/explain"
)

// Explain is the alpha taint-eviction's verdict on each pod of the node
// whose volumes resolve, classified as the controller classifies them. A
// taint without timeAdded counts from now: the controller counts from when
// it first saw it, which only it knows.
func Explain(in explain.Input) []explain.Verdict {
	out := make([]explain.Verdict, 0, len(in.Pods))
	for _, pod := range in.Pods {
		pin, _, err := GatherPod(in.Resolver, in.Node, pod, func(v1.Taint) time.Time { return in.Now }, in.Now)
		if err != nil {
			continue // quarantine's verdict says why the volumes are unknown
		}
		d := DecidePod(pin)
		decision := "leave"
		switch d.Action {
		case ActionWait:
			decision = "evict in " + d.At.Sub(in.Now).Round(time.Second).String()
		case ActionEvict:
			decision = "evict"
		case ActionForceDelete:
			decision = "force-delete"
		case ActionHold:
			decision = "hold"
		}
		out = append(out, explain.Verdict{Controller: Name + " (alpha)", Object: explain.PodRef(pod), Decision: decision, Why: d.Why})
	}
	return out
}
