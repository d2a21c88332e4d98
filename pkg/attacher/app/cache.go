package app

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/pkg/component/kubeclient"
)

// trimForCache trims what the informer caches keep: managed fields, large
// (several kilobytes on a node) and never read, and a node's image list,
// often the largest part of a real node and never read either (the
// attacher judges a node by its taints, conditions and annotations). The
// attacher writes VolumeAttachments and PersistentVolumes with two-way
// merge patches between a cached object and its modified copy, so nothing
// the cache lacks is ever written, and it never writes nodes.
func trimForCache(obj any) (any, error) {
	if n, ok := obj.(*v1.Node); ok {
		n.Status.Images = nil
	}
	return kubeclient.DropManagedFields(obj)
}

var _ cache.TransformFunc = trimForCache
