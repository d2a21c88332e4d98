package remediation

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultNamespaces is where remediations are acted on unless
// --remediation-namespaces says otherwise: the namespace Fenceline's
// manifests install into.
const DefaultNamespaces = "fenceline-system"

// Settings are the controller's own flags.
type Settings struct {
	// Namespaces are the only namespaces whose FencelineRemediations the
	// controller acts on. A remediation powers a node off: whoever may
	// create one may fence any node, so it is trusted only where the
	// health checkers create them and nobody else may.
	Namespaces []string
}

// DefaultSettings returns the defaults.
func DefaultSettings() *Settings { return &Settings{Namespaces: []string{DefaultNamespaces}} }

// AddFlags defines the settings' flags on fs.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.Func("remediation-namespaces",
		fmt.Sprintf("Comma-separated namespaces whose FencelineRemediations the remediation controller acts on (default %s): those where the NodeHealthCheck's template lives, or the MachineHealthCheck's Machines. Whoever may create a FencelineRemediation there may fence any node; remediations elsewhere are ignored.", DefaultNamespaces),
		func(v string) error {
			s.Namespaces = nil
			for _, ns := range strings.Split(v, ",") {
				if ns = strings.TrimSpace(ns); ns != "" {
					s.Namespaces = append(s.Namespaces, ns)
				}
			}
			return nil
		})
}

// Validate checks the settings.
func (s *Settings) Validate() error {
	if len(s.Namespaces) == 0 {
		return fmt.Errorf("--remediation-namespaces must name at least one namespace")
	}
	for _, ns := range s.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--remediation-namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
	}
	return nil
}
