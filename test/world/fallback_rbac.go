package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
)

// fallbackAttacherRBAC is used only while deploy/attacher/rbac.yaml does
// not exist yet: upstream external-attacher's rules plus read access to
// Nodes and CSIDrivers (for the fence decision) and Events.
const fallbackAttacherRBAC = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: fenceline-attacher
  namespace: fenceline-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: fenceline-attacher-test-fallback
rules:
- apiGroups: [""]
  resources: ["persistentvolumes"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["storage.k8s.io"]
  resources: ["csinodes", "csidrivers"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["storage.k8s.io"]
  resources: ["volumeattachments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["storage.k8s.io"]
  resources: ["volumeattachments/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: fenceline-attacher-test-fallback
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: fenceline-attacher-test-fallback
subjects:
- kind: ServiceAccount
  name: fenceline-attacher
  namespace: fenceline-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: fenceline-attacher-test-fallback
  namespace: fenceline-system
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "watch", "list", "delete", "update", "create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: fenceline-attacher-test-fallback
  namespace: fenceline-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: fenceline-attacher-test-fallback
subjects:
- kind: ServiceAccount
  name: fenceline-attacher
  namespace: fenceline-system
`

// applyComponentRBAC applies deploy/<component>/rbac.yaml; for the
// attacher, while that file does not exist yet, it applies a fallback copy
// and says so through warn.
func applyComponentRBAC(ctx context.Context, cs kubernetes.Interface, dir, component string, warn func(string)) error {
	path, err := rbacFile(component)
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && component == "attacher" {
		warn(fmt.Sprintf("%s does not exist yet; using the test's fallback RBAC for the attacher", path))
		path = filepath.Join(dir, "attacher-rbac-fallback.yaml")
		if err := os.WriteFile(path, []byte(fallbackAttacherRBAC), 0o600); err != nil {
			return fmt.Errorf("writing fallback RBAC: %w", err)
		}
	}
	return ApplyRBAC(ctx, cs, path)
}
