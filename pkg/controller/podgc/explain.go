package podgc

import "fenceline.io/fenceline/pkg/controller/explain"

// Explain is podgc's verdict on each pod of the node.
func Explain(in explain.Input) []explain.Verdict {
	out := make([]explain.Verdict, 0, len(in.Pods))
	for _, pod := range in.Pods {
		d := Decide(in.Node, pod)
		out = append(out, explain.Verdict{Controller: Name, Object: explain.PodRef(pod), Decision: explain.DeleteOrLeave(d.Delete), Why: d.Why})
	}
	return out
}
