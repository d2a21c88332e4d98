package rbaccheck

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

const attacherSA = "system:serviceaccount:fenceline-system:fenceline-attacher"

// testPolicy is shaped like an attacher deploy: a ClusterRole bound
// cluster-wide plus a Role for its lease in its own namespace.
const testPolicy = `
# leading comment-only document
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: fenceline-attacher
  namespace: fenceline-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: attacher
rules:
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["storage.k8s.io"]
    resources: ["volumeattachments"]
    verbs: ["get", "list", "watch", "patch"]
  - apiGroups: ["storage.k8s.io"]
    resources: ["volumeattachments/status"]
    verbs: ["patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: attacher
subjects:
  - kind: ServiceAccount
    name: fenceline-attacher
    namespace: fenceline-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: attacher
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: attacher-lease
  namespace: fenceline-system
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "update"]
    resourceNames: ["external-attacher-leader-mock-fenceline-io"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: attacher-lease
  namespace: fenceline-system
subjects:
  - kind: ServiceAccount
    name: fenceline-attacher
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: attacher-lease
`

// call builds a resource call by the attacher; options adjust it.
func call(verb, group, resource string, opts ...func(*Call)) Call {
	c := Call{User: attacherSA, Verb: verb, APIGroup: group, Resource: resource, Code: 200}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func inNamespace(ns string) func(*Call) { return func(c *Call) { c.Namespace = ns } }
func named(n string) func(*Call)        { return func(c *Call) { c.Name = n } }
func sub(s string) func(*Call)          { return func(c *Call) { c.Subresource = s } }
func byUser(u string) func(*Call)       { return func(c *Call) { c.User = u } }

// allAttacherCalls exercises every permission of testPolicy exactly.
func allAttacherCalls() []Call {
	const lease = "external-attacher-leader-mock-fenceline-io"
	return []Call{
		call("get", "", "nodes", named("n1")),
		call("list", "", "nodes"),
		call("watch", "", "nodes"),
		call("get", "storage.k8s.io", "volumeattachments", named("va1")),
		call("list", "storage.k8s.io", "volumeattachments"),
		call("watch", "storage.k8s.io", "volumeattachments"),
		call("patch", "storage.k8s.io", "volumeattachments", named("va1")),
		call("patch", "storage.k8s.io", "volumeattachments", named("va1"), sub("status")),
		call("get", "coordination.k8s.io", "leases", inNamespace("fenceline-system"), named(lease)),
		call("update", "coordination.k8s.io", "leases", inNamespace("fenceline-system"), named(lease)),
		call("create", "coordination.k8s.io", "leases", inNamespace("fenceline-system"), named(lease)),
		{User: attacherSA, Verb: "get", Path: "/apis/storage.k8s.io/v1", Code: 200},
		call("create", "authorization.k8s.io", "selfsubjectaccessreviews"),
	}
}

func without(calls []Call, drop func(Call) bool) []Call {
	var out []Call
	for _, c := range calls {
		if !drop(c) {
			out = append(out, c)
		}
	}
	return out
}

func TestCheck(t *testing.T) {
	policy, err := ParseManifests([]byte(testPolicy))
	if err != nil {
		t.Fatalf("ParseManifests: %v", err)
	}
	tests := []struct {
		name       string
		calls      []Call
		wantDenied []string // Call.String() of each denied call
		wantUnused []string // Permission.String() prefixes
	}{
		{
			name:  "every permission used, nothing denied",
			calls: allAttacherCalls(),
		},
		{
			name: "unused verb on a cluster-wide rule",
			calls: without(allAttacherCalls(), func(c Call) bool {
				return c.Resource == "nodes" && c.Verb == "list"
			}),
			wantUnused: []string{"list nodes cluster-wide (ClusterRole/attacher via ClusterRoleBinding/attacher)"},
		},
		{
			name: "unused subresource permission",
			calls: without(allAttacherCalls(), func(c Call) bool {
				return c.Subresource == "status"
			}),
			wantUnused: []string{"patch volumeattachments.storage.k8s.io/status cluster-wide"},
		},
		{
			name: "unused resourceName rule in a namespace",
			calls: without(allAttacherCalls(), func(c Call) bool {
				return c.Resource == "leases" && c.Verb == "update"
			}),
			wantUnused: []string{"update leases.coordination.k8s.io name=external-attacher-leader-mock-fenceline-io in namespace fenceline-system"},
		},
		{
			name:       "patching the status needs its own rule",
			calls:      append(allAttacherCalls(), call("update", "storage.k8s.io", "volumeattachments", named("va1"), sub("status"))),
			wantDenied: []string{"update volumeattachments.storage.k8s.io/status/va1 (HTTP 200)"},
		},
		{
			name:       "namespaced rule does not reach another namespace",
			calls:      append(allAttacherCalls(), call("create", "coordination.k8s.io", "leases", inNamespace("kube-system"), named("x"))),
			wantDenied: []string{"create leases.coordination.k8s.io/x -n kube-system (HTTP 200)"},
		},
		{
			name:       "namespaced rule does not allow a list across namespaces",
			calls:      append(allAttacherCalls(), call("list", "coordination.k8s.io", "leases")),
			wantDenied: []string{"list leases.coordination.k8s.io (HTTP 200)"},
		},
		{
			name: "resourceNames rule does not allow another name",
			calls: append(allAttacherCalls(),
				call("get", "coordination.k8s.io", "leases", inNamespace("fenceline-system"), named("other"))),
			wantDenied: []string{"get leases.coordination.k8s.io/other -n fenceline-system (HTTP 200)"},
		},
		{
			name: "denied call reported once, with the API server's 403",
			calls: append(allAttacherCalls(),
				call("list", "", "pods", func(c *Call) { c.Code = 403 }),
				call("list", "", "pods", func(c *Call) { c.Code = 403 })),
			wantDenied: []string{"list pods (HTTP 403)"},
		},
		{
			name: "non-resource URL outside discovery",
			calls: append(allAttacherCalls(),
				Call{User: attacherSA, Verb: "get", Path: "/metrics", Code: 403}),
			wantDenied: []string{"get /metrics"},
		},
		{
			name: "other users' calls are ignored",
			calls: append(allAttacherCalls(),
				call("delete", "", "pods", byUser("system:serviceaccount:fenceline-system:fenceline-controller"))),
		},
		{
			name:  "no calls at all: every permission unused",
			calls: nil,
			wantUnused: []string{
				"create leases", "get leases", "get nodes", "get volumeattachments", "list nodes",
				"list volumeattachments", "patch volumeattachments", "patch volumeattachments.storage.k8s.io/status",
				"update leases", "watch nodes", "watch volumeattachments",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Check(policy, attacherSA, tc.calls)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			var denied []string
			for _, c := range rep.Denied {
				denied = append(denied, c.String())
			}
			if !equalPrefixes(denied, tc.wantDenied) {
				t.Errorf("denied = %q, want %q", denied, tc.wantDenied)
			}
			var unused []string
			for _, p := range rep.Unused {
				unused = append(unused, p.String())
			}
			if !equalPrefixes(unused, tc.wantUnused) {
				t.Errorf("unused = %q, want prefixes %q", unused, tc.wantUnused)
			}
			if rep.OK() != (len(tc.wantDenied) == 0 && len(tc.wantUnused) == 0) {
				t.Errorf("OK() = %v with report:\n%s", rep.OK(), rep)
			}
		})
	}
}

// equalPrefixes reports whether got and want have the same length and each
// got[i] starts with want[i], ignoring order of want.
func equalPrefixes(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, g := range got {
			if !used[i] && strings.HasPrefix(g, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestGrantsSubjects(t *testing.T) {
	binding := func(subjects ...rbacv1.Subject) *Policy {
		return &Policy{
			ClusterRoles: []rbacv1.ClusterRole{{
				ObjectMeta: metaName("r"),
				Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}},
			}},
			ClusterRoleBindings: []rbacv1.ClusterRoleBinding{{
				ObjectMeta: metaName("b"),
				Subjects:   subjects,
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "r"},
			}},
		}
	}
	tests := []struct {
		name    string
		subject rbacv1.Subject
		user    string
		want    bool
	}{
		{"service account by name", rbacv1.Subject{Kind: "ServiceAccount", Name: "a", Namespace: "ns"}, "system:serviceaccount:ns:a", true},
		{"service account of another namespace", rbacv1.Subject{Kind: "ServiceAccount", Name: "a", Namespace: "other"}, "system:serviceaccount:ns:a", false},
		{"all service accounts of a namespace", rbacv1.Subject{Kind: "Group", Name: "system:serviceaccounts:ns"}, "system:serviceaccount:ns:a", true},
		{"all authenticated users", rbacv1.Subject{Kind: "Group", Name: "system:authenticated"}, "alice", true},
		{"user by name", rbacv1.Subject{Kind: "User", Name: "alice"}, "alice", true},
		{"user is not a service account", rbacv1.Subject{Kind: "ServiceAccount", Name: "alice", Namespace: "ns"}, "alice", false},
		{"service-account group does not match a plain user", rbacv1.Subject{Kind: "Group", Name: "system:serviceaccounts"}, "alice", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			grants, err := binding(tc.subject).Grants(tc.user)
			if err != nil {
				t.Fatalf("Grants: %v", err)
			}
			if got := len(grants) > 0; got != tc.want {
				t.Errorf("granted = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseManifestsErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{
			name:    "unknown field in a rule",
			yaml:    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\nrules:\n- apiGroups: ['']\n  resource: [nodes]\n  verbs: [get]\n",
			wantErr: "unknown field",
		},
		{
			name:    "role without namespace",
			yaml:    "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: x}\n",
			wantErr: "no namespace on Role x",
		},
		{
			name:    "aggregated cluster role",
			yaml:    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\naggregationRule: {clusterRoleSelectors: [{matchLabels: {a: b}}]}\n",
			wantErr: "aggregationRule",
		},
		{
			name:    "document without kind",
			yaml:    "metadata: {name: x}\n",
			wantErr: "no kind",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifests([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseManifests error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestCheckMissingRole(t *testing.T) {
	policy, err := ParseManifests([]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: b, namespace: ns}
subjects: [{kind: ServiceAccount, name: a}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: missing}
`))
	if err != nil {
		t.Fatalf("ParseManifests: %v", err)
	}
	_, err = Check(policy, ServiceAccountUser("ns", "a"), nil)
	if err == nil || !strings.Contains(err.Error(), "roleRef Role ns/missing is not in the manifests") {
		t.Fatalf("Check error = %v, want the missing role named", err)
	}
}
