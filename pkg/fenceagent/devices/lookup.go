package devices

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
)

// BuildFunc is the signature of Build; a controller holds one so that its
// tests can build fake devices.
type BuildFunc func(*fencingv1alpha1.FenceClass, fencingv1alpha1.FenceEndpoint, *corev1.Secret) (power.Device, error)

// Source finds an endpoint's FenceClass and credentials Secret in informer
// caches, for the probe and the executor alike.
type Source struct {
	Classes fencinglisters.FenceClassLister
	// Secrets lists Namespace only: credential Secrets must live there.
	Secrets   corelisters.SecretLister
	Namespace string
	// Build builds the device; nil means Build.
	Build BuildFunc
}

// Endpoint is an endpoint's class, credentials Secret and device.
type Endpoint struct {
	Class  *fencingv1alpha1.FenceClass
	Secret *corev1.Secret
	Device power.Device
}

// Device looks up the endpoint's class and Secret and builds its device.
// The error, if any, is scrubbed of the Secret's password; the class and
// Secret found are returned with it.
func (s Source) Device(ep fencingv1alpha1.FenceEndpoint) (Endpoint, error) {
	var e Endpoint
	var err error
	if e.Class, e.Secret, err = s.Lookup(ep); err != nil {
		return e, err
	}
	build := s.Build
	if build == nil {
		build = Build
	}
	if e.Device, err = build(e.Class, ep, e.Secret); err != nil {
		return e, Scrub(err, e.Secret)
	}
	return e, nil
}

// Lookup returns the endpoint's class and Secret; a missing one is nil,
// for Build to report. A Secret outside Namespace is an
// ErrInvalidConfiguration.
func (s Source) Lookup(ep fencingv1alpha1.FenceEndpoint) (*fencingv1alpha1.FenceClass, *corev1.Secret, error) {
	class, err := s.Classes.Get(ep.FenceClassName)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("getting FenceClass %s: %w", ep.FenceClassName, err)
	}
	ref, err := SecretRef(class, ep)
	if err != nil {
		return class, nil, nil
	}
	if ref.Namespace != s.Namespace {
		return nil, nil, fmt.Errorf("%w: credentials Secret %s/%s: the fence agent reads Secrets in namespace %s only",
			ErrInvalidConfiguration, ref.Namespace, ref.Name, s.Namespace)
	}
	secret, err := s.Secrets.Secrets(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return class, nil, nil
	} else if err != nil {
		return class, nil, fmt.Errorf("getting Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return class, secret, nil
}
