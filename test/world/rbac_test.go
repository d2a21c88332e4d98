package world

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

func TestDecodeAll(t *testing.T) {
	tests := []struct {
		name      string
		manifest  string
		wantKinds []string
		wantErr   string
	}{
		{
			name:      "fallback attacher RBAC",
			manifest:  fallbackAttacherRBAC,
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
			objs, err := decodeAll([]byte(tc.manifest))
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
