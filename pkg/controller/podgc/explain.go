package podgc

import "fenceline.io/fenceline/pkg/controller/explain"

// Explain is podgc's verdict on each pod of the node, on the input Gather
// reads from the plugin's view.
func Explain(in explain.Input) []explain.Verdict {
	o, err := Gather(in.Ctx, in.View, in.Node.Name)
	if err != nil {
		return []explain.Verdict{{Controller: Name, Object: explain.NodeRef(in.Node), Decision: "unknown", Why: err.Error()}}
	}
	out := make([]explain.Verdict, 0, len(o.Pods))
	for _, pod := range o.Pods {
		d := Decide(o.Node, pod)
		out = append(out, explain.Verdict{Controller: Name, Object: explain.PodRef(pod), Decision: explain.DeleteOrLeave(d.Delete), Why: d.Why})
	}
	return out
}
