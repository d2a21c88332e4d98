package chaos

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/world"
)

// createSets provisions each set's volume on its driver and creates the
// StatefulSet. In a plan of two drivers the sets after the first prefer
// the first one's node, so that the node the episode fails usually holds
// volumes of both drivers: the safe-detach one's must move, the other's
// must stay.
func (e *episode) createSets() error {
	for i, s := range e.p.Sets {
		// The StatefulSet's claim asks for ReadWriteOnce: a multi-writer
		// PV must offer that too to bind it.
		modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		if s.Mode != corev1.ReadWriteOnce {
			modes = append(modes, s.Mode)
		}
		handles, err := e.w.ProvisionStatefulSetOn(e.ctx, s.driver(), namespace, s.Name, 1, modes...)
		if err != nil {
			return err
		}
		e.handles[s.Name] = handles[0]
		set := world.StatefulSetOf(namespace, s.Name, 1, e.w.StorageClassOf(s.driver()))
		if e.p.TwoDrivers && i > 0 {
			set.Spec.Template.Spec.Affinity = nearFirstSet(e.p.Sets[0].Name)
		}
		if _, err := e.w.Cluster.Client().AppsV1().StatefulSets(namespace).Create(e.ctx, set, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating StatefulSet %s: %w", s.Name, err)
		}
	}
	return nil
}

// nearFirstSet prefers the node of the pods of StatefulSet first: a
// preference only, so that a replacement still goes wherever it can.
func nearFirstSet(first string) *corev1.Affinity {
	return &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": first}},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}

// addAudits adds every driver's calls of interest to the timeline; with
// two drivers each volume is named with its driver.
func (e *episode) addAudits(audits map[string][]audit.Record) {
	for d, recs := range audits {
		if len(audits) > 1 {
			recs = slices.Clone(recs)
			for i := range recs {
				recs[i].VolumeID = driverShort(d) + "^" + recs[i].VolumeID
			}
		}
		e.timeline.AddAudit(recs)
	}
}

// twoDriverSummary is the summary's line on plans of two drivers, empty
// when no episode ran two: how many did, how many of them under
// safe-detach (where the other driver's sets stay until the restore),
// and the driver and attacher faults aimed at each driver.
func twoDriverSummary(results []Result) string {
	episodes, safeDetach := 0, 0
	aimed := map[string]int{}
	for _, r := range results {
		if !r.Plan.TwoDrivers {
			continue
		}
		episodes++
		if r.Plan.Recovery == SafeDetach {
			safeDetach++
		}
		for _, f := range r.Plan.Faults {
			if f.Driver != "" {
				aimed[f.Driver]++
			}
		}
	}
	if episodes == 0 {
		return ""
	}
	return fmt.Sprintf("  two drivers: %d episodes, %d of them under safe-detach (the other driver's sets left for the restore); driver and attacher faults: %d at %s, %d at %s\n",
		episodes, safeDetach, aimed[world.DriverName], driverShort(world.DriverName), aimed[world.SecondDriverName], driverShort(world.SecondDriverName))
}
