package rbaccheck

import (
	"fmt"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// Permission is one atomic permission a deploy grants: one verb on one
// resource (or non-resource URL), optionally one resource name, in one
// namespace or cluster-wide.
type Permission struct {
	Verb         string
	APIGroup     string
	Resource     string // "resource" or "resource/subresource"
	ResourceName string
	URL          string // non-resource URL
	Namespace    string // empty: cluster-wide
	Source       string
}

// String renders the permission for a report.
func (p Permission) String() string {
	var b strings.Builder
	b.WriteString(p.Verb + " ")
	if p.URL != "" {
		b.WriteString(p.URL)
	} else {
		res, sub, _ := strings.Cut(p.Resource, "/")
		b.WriteString(qualifiedResource(p.APIGroup, res, sub))
		if p.ResourceName != "" {
			b.WriteString(" name=" + p.ResourceName)
		}
	}
	if p.Namespace != "" {
		b.WriteString(" in namespace " + p.Namespace)
	} else {
		b.WriteString(" cluster-wide")
	}
	b.WriteString(" (" + p.Source + ")")
	return b.String()
}

// Report is the outcome of Check for one user.
type Report struct {
	User string
	// Denied lists the distinct calls that no granted rule allows, in the
	// order they were first made. In a cluster they fail with 403.
	Denied []Call
	// Unused lists the granted permissions no call exercised, sorted.
	Unused []Permission
	// Calls is how many of the given calls belonged to User.
	Calls int
}

// OK reports whether every call was allowed and every permission used.
func (r Report) OK() bool { return len(r.Denied) == 0 && len(r.Unused) == 0 }

// String renders the report, one finding per line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "RBAC check for %s: %d calls, %d denied, %d unused permissions\n", r.User, r.Calls, len(r.Denied), len(r.Unused))
	for _, c := range r.Denied {
		fmt.Fprintf(&b, "  not allowed: %s\n", c)
	}
	for _, p := range r.Unused {
		fmt.Fprintf(&b, "  never used:  %s\n", p)
	}
	return b.String()
}

// Check compares the calls user made with the rules policy grants user.
// Calls of other users are ignored, so one audit log of a whole test run can
// be checked component by component. The rules every authenticated user holds
// (DefaultAuthenticatedRules) count as granted but are never reported unused.
func Check(policy *Policy, user string, calls []Call) (Report, error) {
	grants, err := policy.Grants(user)
	if err != nil {
		return Report{}, fmt.Errorf("resolving the rules of %s: %w", user, err)
	}
	allowed := append([]Grant(nil), grants...)
	for _, r := range DefaultAuthenticatedRules {
		allowed = append(allowed, Grant{Rule: r, Source: "Kubernetes default"})
	}

	rep := Report{User: user}
	var mine []Call
	denied := map[string]bool{}
	for _, c := range calls {
		if c.User != user {
			continue
		}
		mine = append(mine, c)
		if permits(allowed, c) {
			continue
		}
		key := callKey(c)
		if !denied[key] {
			denied[key] = true
			rep.Denied = append(rep.Denied, c)
		}
	}
	rep.Calls = len(mine)

	seen := map[string]bool{}
	for _, g := range grants {
		for _, atom := range validation.BreakdownRule(g.Rule) {
			single := []Grant{{Namespace: g.Namespace, Rule: atom}}
			used := false
			for _, c := range mine {
				if permits(single, c) {
					used = true
					break
				}
			}
			if used {
				continue
			}
			p := permissionOf(atom, g)
			if k := p.String(); !seen[k] {
				seen[k] = true
				rep.Unused = append(rep.Unused, p)
			}
		}
	}
	sort.Slice(rep.Unused, func(i, j int) bool { return rep.Unused[i].String() < rep.Unused[j].String() })
	return rep, nil
}

// permits reports whether any grant allows the call, honouring the
// namespace a grant is bound to.
func permits(grants []Grant, c Call) bool {
	want := ruleOf(c)
	for _, g := range grants {
		if g.Namespace != "" && (!c.IsResource() || g.Namespace != c.Namespace) {
			continue
		}
		if covered, _ := validation.Covers([]rbacv1.PolicyRule{g.Rule}, []rbacv1.PolicyRule{want}); covered {
			return true
		}
	}
	return false
}

// ruleOf turns a call into the single-verb rule the RBAC authorizer checks.
func ruleOf(c Call) rbacv1.PolicyRule {
	if !c.IsResource() {
		return rbacv1.PolicyRule{Verbs: []string{c.Verb}, NonResourceURLs: []string{c.Path}}
	}
	res := c.Resource
	if c.Subresource != "" {
		res += "/" + c.Subresource
	}
	r := rbacv1.PolicyRule{Verbs: []string{c.Verb}, APIGroups: []string{c.APIGroup}, Resources: []string{res}}
	// The authorizer sees no name on a create (the name is in the body,
	// not the URL), so a rule limited to resourceNames never allows one.
	if c.Name != "" && c.Verb != "create" {
		r.ResourceNames = []string{c.Name}
	}
	return r
}

func permissionOf(atom rbacv1.PolicyRule, g Grant) Permission {
	p := Permission{Verb: atom.Verbs[0], Namespace: g.Namespace, Source: g.Source}
	if len(atom.NonResourceURLs) > 0 {
		p.URL = atom.NonResourceURLs[0]
		return p
	}
	p.APIGroup = atom.APIGroups[0]
	p.Resource = atom.Resources[0]
	if len(atom.ResourceNames) > 0 {
		p.ResourceName = atom.ResourceNames[0]
	}
	return p
}

func callKey(c Call) string {
	return strings.Join([]string{c.Verb, c.APIGroup, c.Resource, c.Subresource, c.Namespace, c.Name, c.Path}, "\x00")
}
