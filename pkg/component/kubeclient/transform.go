package kubeclient

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// DropManagedFields is an informer transform that drops an object's
// managed fields before it is cached: they are often larger than the rest
// of the object and no component reads them. Writes made from a cached
// copy lose nothing by it: an update without managed fields leaves the
// stored ones as they are.
func DropManagedFields(obj any) (any, error) {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok && a.GetObjectMeta() != nil {
		a.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

var _ cache.TransformFunc = DropManagedFields
