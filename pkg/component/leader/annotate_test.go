package leader

import (
	"context"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

const versionKey = "fenceline.io/version"

func TestAnnotatingWrites(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	leases := annotating(client.CoordinationV1(), map[string]string{versionKey: "v1.2.3"}).Leases("ns")
	in := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Annotations: map[string]string{"other": "kept"}}}
	created, err := leases.Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Annotations[versionKey] != "v1.2.3" || created.Annotations["other"] != "kept" {
		t.Errorf("created with annotations %v, want the version beside the caller's", created.Annotations)
	}
	if _, ok := in.Annotations[versionKey]; ok {
		t.Error("the caller's Lease was changed; the elector's own object must stay as it is")
	}
	// A write from a replica of another version, then one of this: the
	// Lease says who holds it now.
	stale := created.DeepCopy()
	stale.Annotations[versionKey] = "v1.0.0"
	stale, err = client.CoordinationV1().Leases("ns").Update(ctx, stale, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	updated, err := leases.Update(ctx, stale, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Annotations[versionKey] != "v1.2.3" {
		t.Errorf("updated with %q, want v1.2.3", updated.Annotations[versionKey])
	}
	if c := client.CoordinationV1(); annotating(c, nil) != c {
		t.Error("no annotations should leave the client as it is")
	}
}

// While a replica leads, its renewals keep its annotations on the Lease.
func TestRunAnnotatesTheLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := fake.NewClientset()
	e, err := New(Config{
		Options: Options{Enabled: true, Namespace: "ns", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond},
		Name:    "lease", Identity: "me", Core: client.CoreV1(), Coordination: client.CoordinationV1(),
		Annotations: map[string]string{versionKey: "v1.2.3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Run(ctx, func(ctx context.Context) error {
		var renewals int
		var last time.Time
		return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases("ns").Get(ctx, "lease", metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil {
				return false, nil //nolint:nilerr // not created yet
			}
			if got := l.Annotations[versionKey]; got != "v1.2.3" {
				t.Errorf("the held Lease carries version %q, want v1.2.3", got)
				return true, nil
			}
			if !l.Spec.RenewTime.Time.Equal(last) {
				renewals++
				last = l.Spec.RenewTime.Time
			}
			return renewals >= 3, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
