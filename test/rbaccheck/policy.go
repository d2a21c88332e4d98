package rbaccheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Policy holds the RBAC objects of a set of manifests.
type Policy struct {
	Roles               []rbacv1.Role
	ClusterRoles        []rbacv1.ClusterRole
	RoleBindings        []rbacv1.RoleBinding
	ClusterRoleBindings []rbacv1.ClusterRoleBinding
}

// Grant is one rule a user holds, with where it applies and where it comes
// from.
type Grant struct {
	// Namespace is where the rule applies; empty for a ClusterRoleBinding,
	// which applies to cluster-scoped resources and to every namespace.
	Namespace string
	Rule      rbacv1.PolicyRule
	// Source names the role and binding, e.g.
	// "ClusterRole/x via ClusterRoleBinding/x".
	Source string
}

// DefaultAuthenticatedRules are the rules every authenticated user holds
// through Kubernetes' bootstrap ClusterRoles system:basic-user,
// system:discovery and system:public-info-viewer. Calls they allow (API
// discovery, /version, self-reviews) are never reported as denied, and the
// rules themselves are never reported as unused: the deploy does not grant them.
var DefaultAuthenticatedRules = []rbacv1.PolicyRule{
	{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
	{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
	{Verbs: []string{"get"}, NonResourceURLs: []string{"/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"}},
}

// newRBACDecoder returns a strict decoder for rbac.authorization.k8s.io/v1:
// unknown or duplicate fields are errors, as they are for kubectl apply.
func newRBACDecoder() (runtime.Decoder, error) {
	s := runtime.NewScheme()
	if err := rbacv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering RBAC types: %w", err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer(), nil
}

// ParseManifests reads a multi-document YAML stream, such as the output of
// `kubectl kustomize`, and keeps its Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings. Other kinds are skipped; a malformed RBAC object is an
// error, so that a typo in a manifest cannot silently drop a rule.
func ParseManifests(data []byte) (*Policy, error) {
	dec, err := newRBACDecoder()
	if err != nil {
		return nil, err
	}
	p := &Policy{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return p, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := utilyaml.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if meta.Kind == "" {
			// A YAML document holding only comments.
			if isOnlyComments(raw) {
				continue
			}
			return nil, fmt.Errorf("document %d: no kind", doc)
		}
		if meta.APIVersion != rbacv1.SchemeGroupVersion.String() {
			continue
		}
		obj, _, err := dec.Decode(raw, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", doc, meta.Kind, err)
		}
		if err := p.add(obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
	}
}

func isOnlyComments(raw []byte) bool {
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

func (p *Policy) add(obj runtime.Object) error {
	switch o := obj.(type) {
	case *rbacv1.Role:
		if o.Namespace == "" {
			return fmt.Errorf("no namespace on Role %s", o.Name)
		}
		p.Roles = append(p.Roles, *o)
	case *rbacv1.RoleBinding:
		if o.Namespace == "" {
			return fmt.Errorf("no namespace on RoleBinding %s", o.Name)
		}
		p.RoleBindings = append(p.RoleBindings, *o)
	case *rbacv1.ClusterRole:
		if o.AggregationRule != nil {
			// Aggregated rules are filled in by a controller at run time
			// and cannot be judged from the manifest.
			return fmt.Errorf("aggregationRule on ClusterRole %s: not supported by this check", o.Name)
		}
		p.ClusterRoles = append(p.ClusterRoles, *o)
	case *rbacv1.ClusterRoleBinding:
		p.ClusterRoleBindings = append(p.ClusterRoleBindings, *o)
	}
	return nil
}

// Grants returns the rules user holds through the policy's bindings. A
// service-account user name ("system:serviceaccount:<ns>:<name>") also
// matches ServiceAccount subjects and the groups Kubernetes gives service
// accounts. A binding that refers to a role missing from the policy is an
// error: applied to a cluster, it would grant nothing.
func (p *Policy) Grants(user string) ([]Grant, error) {
	var grants []Grant
	for _, b := range p.ClusterRoleBindings {
		if !anySubjectMatches(b.Subjects, user, "") {
			continue
		}
		rules, src, err := p.resolve(b.RoleRef, "")
		if err != nil {
			return nil, fmt.Errorf("ClusterRoleBinding %s: %w", b.Name, err)
		}
		for _, r := range rules {
			grants = append(grants, Grant{Rule: r, Source: src + " via ClusterRoleBinding/" + b.Name})
		}
	}
	for _, b := range p.RoleBindings {
		if !anySubjectMatches(b.Subjects, user, b.Namespace) {
			continue
		}
		rules, src, err := p.resolve(b.RoleRef, b.Namespace)
		if err != nil {
			return nil, fmt.Errorf("RoleBinding %s/%s: %w", b.Namespace, b.Name, err)
		}
		for _, r := range rules {
			grants = append(grants, Grant{Namespace: b.Namespace, Rule: r, Source: src + " via RoleBinding/" + b.Namespace + "/" + b.Name})
		}
	}
	return grants, nil
}

func (p *Policy) resolve(ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, string, error) {
	switch ref.Kind {
	case "ClusterRole":
		for _, r := range p.ClusterRoles {
			if r.Name == ref.Name {
				return r.Rules, "ClusterRole/" + r.Name, nil
			}
		}
		return nil, "", fmt.Errorf("roleRef ClusterRole %s is not in the manifests", ref.Name)
	case "Role":
		if namespace == "" {
			return nil, "", fmt.Errorf("a ClusterRoleBinding cannot refer to Role %s", ref.Name)
		}
		for _, r := range p.Roles {
			if r.Name == ref.Name && r.Namespace == namespace {
				return r.Rules, "Role/" + namespace + "/" + r.Name, nil
			}
		}
		return nil, "", fmt.Errorf("roleRef Role %s/%s is not in the manifests", namespace, ref.Name)
	default:
		return nil, "", fmt.Errorf("roleRef has unknown kind %q", ref.Kind)
	}
}

// anySubjectMatches reports whether user is one of subjects. bindingNS is the
// namespace of a RoleBinding, which is the default namespace of its
// ServiceAccount subjects.
func anySubjectMatches(subjects []rbacv1.Subject, user, bindingNS string) bool {
	saNS, saName, isSA := splitServiceAccount(user)
	groups := []string{"system:authenticated"}
	if isSA {
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+saNS)
	}
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if s.Name == user {
				return true
			}
		case rbacv1.GroupKind:
			for _, g := range groups {
				if s.Name == g {
					return true
				}
			}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = bindingNS
			}
			if isSA && s.Name == saName && ns == saNS {
				return true
			}
		}
	}
	return false
}

// ServiceAccountUser returns the user name Kubernetes gives a service account.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

func splitServiceAccount(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}
