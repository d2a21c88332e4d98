package forceeviction

import "fenceline.io/fenceline/pkg/controller/explain"

// Explain is force-eviction's verdict on each pod of the node, its Lease
// judged by its renewTime (explain has no history of renewals).
func Explain(in explain.Input) []explain.Verdict {
	s, ok := in.Settings.(*Settings)
	if !ok {
		s = DefaultSettings()
	}
	o, err := Gather(in.Ctx, in.View, in.Node.Name)
	if err != nil {
		return []explain.Verdict{{Controller: Name, Object: explain.NodeRef(in.Node), Decision: "unknown", Why: err.Error()}}
	}
	out := make([]explain.Verdict, 0, len(o.Pods))
	for _, pod := range o.Pods {
		d := DecidePod(o.Node, pod, o.Lease, in.Now, s.ReadyGrace)
		out = append(out, explain.Verdict{Controller: Name, Object: explain.PodRef(pod), Decision: explain.DeleteOrLeave(d.Delete), Why: d.Why})
	}
	return out
}
