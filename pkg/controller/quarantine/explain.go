package quarantine

import (
	"time"

	"fenceline.io/fenceline/pkg/controller/explain"
	"fenceline.io/fenceline/pkg/cutoff"
)

// Explain is quarantine's verdict on each pod of the node, on the
// attachers' heartbeats judged by their renewTime as a snapshot
// (cutoff.Snapshot: explain has no history of renewals).
func Explain(in explain.Input) []explain.Verdict {
	s, ok := in.Settings.(*Settings)
	if !ok {
		s = DefaultSettings()
	}
	attachers := Attachers{}
	for _, d := range in.Drivers {
		attachers[d.Name] = cutoff.AttacherServes(d.Name, cutoff.Snapshot(in.Heartbeats, in.Now), d, in.Now)
	}
	o, err := Gather(in.Ctx, in.View, in.Node.Name)
	if err != nil {
		return []explain.Verdict{{Controller: Name, Object: explain.NodeRef(in.Node), Decision: "unknown", Why: err.Error()}}
	}
	out := make([]explain.Verdict, 0, len(o.Pods))
	for _, pod := range o.Pods {
		v := explain.Verdict{Controller: Name, Object: explain.PodRef(pod)}
		vols, err := in.Resolver.PodVolumes(pod)
		if err != nil {
			v.Decision, v.Why = "unknown", err.Error()
		} else {
			d := DecidePod(o.Node, pod, vols, attachers, in.Now, s.Delay)
			v.Decision, v.Why = actionWord(d), d.Why
		}
		out = append(out, v)
	}
	return out
}

func actionWord(d PodDecision) string {
	switch d.Action {
	case Wait:
		return "wait " + d.After.Round(time.Second).String()
	case Refuse:
		return "refuse"
	case TaintFirst:
		return "quarantine the node"
	case Delete:
		return "force-delete"
	}
	return "leave"
}
