package world

import (
	"errors"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

func TestDecodeAll(t *testing.T) {
	tests := []struct {
		name     string
		manifest string
		// component, if set, reads deploy/<component>/rbac.yaml instead
		// of manifest.
		component string
		wantKinds []string
		wantErr   string
	}{
		{
			name:      "deployed attacher RBAC",
			component: "attacher",
			wantKinds: []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"},
		},
		{
			name:      "deployed controller RBAC",
			component: "controller",
			wantKinds: []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"},
		},
		{
			name:      "comments and empty documents are skipped",
			manifest:  "# header\n---\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: b\n",
			wantKinds: []string{"ServiceAccount"},
		},
		{
			name:     "unknown kind",
			manifest: "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
			wantErr:  "no kind",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.manifest)
			if tc.component != "" {
				path, err := rbacFile(tc.component)
				if err != nil {
					t.Fatal(err)
				}
				if data, err = os.ReadFile(path); err != nil {
					t.Fatal(err)
				}
			}
			objs, err := decodeAll(data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("decodeAll error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				switch o.(type) {
				case *corev1.ServiceAccount:
					kinds = append(kinds, "ServiceAccount")
				case *rbacv1.ClusterRole:
					kinds = append(kinds, "ClusterRole")
				case *rbacv1.ClusterRoleBinding:
					kinds = append(kinds, "ClusterRoleBinding")
				case *rbacv1.Role:
					kinds = append(kinds, "Role")
				case *rbacv1.RoleBinding:
					kinds = append(kinds, "RoleBinding")
				default:
					kinds = append(kinds, "other")
				}
			}
			if strings.Join(kinds, ",") != strings.Join(tc.wantKinds, ",") {
				t.Fatalf("kinds = %v, want %v", kinds, tc.wantKinds)
			}
		})
	}
}

func TestApplyComponentRBACWithoutManifest(t *testing.T) {
	// The manifest is checked before the API is used, so no client is needed.
	err := applyComponentRBAC(t.Context(), nil, "no-such-component")
	if err == nil {
		t.Fatal("applyComponentRBAC succeeded without a manifest")
	}
	want := "the no-such-component has no RBAC manifest"
	if !strings.Contains(err.Error(), want) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("applyComponentRBAC error = %v, want one containing %q that wraps os.ErrNotExist", err, want)
	}
}
