package v1alpha1

// FenceAction is what a fence does to a node's power.
// +kubebuilder:validation:Enum=Off;Reboot
type FenceAction string

const (
	// FenceActionOff powers the node off and leaves it off. The default.
	FenceActionOff FenceAction = "Off"
	// FenceActionReboot powers the node off, verifies that it is off, and
	// powers it on again. The fence succeeds once Off is verified: the
	// power-on is not needed for safety.
	FenceActionReboot FenceAction = "Reboot"
)

// SecretReference names a Secret holding credentials, for example a BMC's
// username and password. Only the fence agent reads it; the Secret's keys
// are described by the method (docs/fencing-api.md).
type SecretReference struct {
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the Secret. Every kind here is cluster-scoped, so the
	// namespace is explicit.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}
