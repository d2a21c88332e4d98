package outofservice

import "fenceline.io/fenceline/pkg/controller/explain"

// Explain is the opt-in out-of-service taint remover's verdict on the node.
func Explain(in explain.Input) []explain.Verdict {
	v := explain.Verdict{Controller: "out-of-service (opt-in)", Object: explain.NodeRef(in.Node)}
	g, err := Gather(in.Ctx, in.View, in.Node.Name)
	if err != nil {
		v.Decision, v.Why = "unknown", err.Error()
		return []explain.Verdict{v}
	}
	d := g.Decide()
	v.Decision, v.Why = "keep", d.Why
	switch {
	case d.Untaint:
		v.Decision = "remove the out-of-service taint"
	case d.RecordBootID:
		v.Decision = "record the boot ID"
	case d.ClearRecord:
		v.Decision = "forget the recorded boot ID"
	}
	return []explain.Verdict{v}
}
