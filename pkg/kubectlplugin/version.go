package kubectlplugin

import (
	"context"
	"fmt"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"

	"fenceline.io/fenceline/pkg/names"
)

// leaderComponents are the components whose leader-election Lease carries
// the version of the replica that holds it (names.LeaderVersionAnnotation).
var leaderComponents = []string{"fenceline-controller", "fenceline-fence-agent"}

// attacherVersions lists, one line per CSI driver that has a
// fenceline-attacher heartbeat, the version that attacher reports, with a
// warning where it differs from the plugin's own (a plugin of another
// release may read fields and annotations differently). A plugin built
// without a release version ("dev") warns about nothing.
func attacherVersions(s *Snapshot, plugin string) []string {
	var lines []string
	for _, d := range s.Drivers {
		l := newestHeartbeat(s.Heartbeats, d.Name)
		if l == nil {
			continue
		}
		v := l.Annotations[names.HeartbeatVersionAnnotation]
		lines = append(lines, fmt.Sprintf("fenceline-attacher of %s: %s%s", d.Name, orUnknownVersion(v), skewWarning(plugin, v)))
	}
	if len(lines) == 0 {
		lines = append(lines, "no fenceline-attacher heartbeat found: no driver runs fenceline-attacher, or its Lease cannot be read")
	}
	slices.Sort(lines)
	return lines
}

// readLeaderLeases reads, in every namespace, the leader-election Leases
// of leaderComponents.
func readLeaderLeases(ctx context.Context, kube kubernetes.Interface) ([]*coordinationv1.Lease, error) {
	var out []*coordinationv1.Lease
	for _, name := range leaderComponents {
		list, err := kube.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
		})
		if err != nil {
			return nil, permissionHint(err, "list", "leases.coordination.k8s.io")
		}
		out = append(out, pointers(list.Items)...)
	}
	return out, nil
}

// leaderVersions lists, one line per component of leaderComponents, the
// version its leader reports on its Lease, with a warning where the plugin
// is of another release, saying so when it is the older one: it may not
// know what that controller writes.
func leaderVersions(leases []*coordinationv1.Lease, plugin string) []string {
	var lines []string
	for _, name := range leaderComponents {
		found := false
		for _, l := range leases {
			if l.Name != name {
				continue
			}
			found = true
			v := l.Annotations[names.LeaderVersionAnnotation]
			lines = append(lines, fmt.Sprintf("%s (Lease %s/%s): %s%s", name, l.Namespace, l.Name, orUnknownVersion(v), skewWarning(plugin, v)))
		}
		if !found {
			lines = append(lines, fmt.Sprintf("%s: no leader-election Lease found (it runs without --leader-election, or is not installed)", name))
		}
	}
	return lines
}

// skewWarning is the warning for a component of version v seen by a plugin
// of version plugin: none when they match, when either is unknown or when
// the plugin has no release version ("dev").
func skewWarning(plugin, v string) string {
	if plugin == "dev" || v == "" || v == plugin {
		return ""
	}
	pv, perr := utilversion.ParseSemantic(plugin)
	cv, cerr := utilversion.ParseSemantic(v)
	if perr == nil && cerr == nil && pv.LessThan(cv) {
		return fmt.Sprintf(" (warning: this plugin, %s, is older; it may not know what %s writes: use the plugin of the release you run)", plugin, v)
	}
	return fmt.Sprintf(" (warning: this plugin is %s; use the plugin of the release you run)", plugin)
}

func orUnknownVersion(v string) string {
	if v == "" {
		return "version not reported"
	}
	return v
}
