package kubectlplugin

import (
	"fmt"
	"slices"

	"fenceline.io/fenceline/pkg/names"
)

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
		line := fmt.Sprintf("fenceline-attacher of %s: %s", d.Name, orUnknownVersion(v))
		if plugin != "dev" && v != "" && v != plugin {
			line += fmt.Sprintf(" (warning: this plugin is %s; use the plugin of the release you run)", plugin)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		lines = append(lines, "no fenceline-attacher heartbeat found: no driver runs fenceline-attacher, or its Lease cannot be read")
	}
	slices.Sort(lines)
	return lines
}

func orUnknownVersion(v string) string {
	if v == "" {
		return "version not reported"
	}
	return v
}
