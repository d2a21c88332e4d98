package networkfence

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Writer makes Fenceline's NetworkFence writes.
type Writer struct {
	Client dynamic.Interface
}

// Create creates the NetworkFence of s. One that exists already counts
// as created when it was made for the same request (a retry after a lost
// answer); one of another request is an error, never adopted.
func (w Writer) Create(ctx context.Context, s Spec) error {
	_, err := w.Client.Resource(Resource).Create(ctx, s.Object(), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, getErr := w.Client.Resource(Resource).Get(ctx, s.Name, metav1.GetOptions{})
		if getErr != nil {
			return fmt.Errorf("reading NetworkFence %s, which exists: %w", s.Name, getErr)
		}
		if got := cur.GetLabels()[RequestLabel]; got != string(s.Request) {
			return fmt.Errorf("NetworkFence %s exists for another FencingRequest (%s=%q)", s.Name, RequestLabel, got)
		}
		return nil
	}
	if err != nil {
		return notServed(err, "creating NetworkFence "+s.Name)
	}
	return nil
}

// Unfence asks for the NetworkFence's CIDRs to be unfenced.
func (w Writer) Unfence(ctx context.Context, name string) error {
	patch := []byte(`{"spec":{"fenceState":"` + StateUnfenced + `"}}`)
	if _, err := w.Client.Resource(Resource).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("setting NetworkFence %s Unfenced: %w", name, err)
	}
	return nil
}

// Delete deletes the NetworkFence; one already gone is not an error.
func (w Writer) Delete(ctx context.Context, name string) error {
	if err := w.Client.Resource(Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting NetworkFence %s: %w", name, err)
	}
	return nil
}
