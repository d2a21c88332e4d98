package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// wideOutput is kubectl's -o wide: the tables with their wide columns.
const wideOutput = "wide"

// outputFlags are -o and the template flags of a command that prints a
// report. Without -o the report prints as tables, with -o wide as tables
// with their wide columns; any other format is one of cli-runtime's
// printers (json, yaml, kyaml, jsonpath, go-template) of the report's JSON
// form. -o name is not offered: a report is no object with a name.
type outputFlags struct {
	flags *genericclioptions.PrintFlags
	// structured is the printer -o names, nil for tables.
	structured printers.ResourcePrinter
	wide       bool
}

func newOutputFlags() *outputFlags {
	format := ""
	return &outputFlags{flags: &genericclioptions.PrintFlags{
		OutputFormat:         &format,
		JSONYamlPrintFlags:   genericclioptions.NewJSONYamlPrintFlags(),
		TemplatePrinterFlags: genericclioptions.NewKubeTemplatePrintFlags(),
	}}
}

// formats are the values -o takes, as the help and errors list them.
func (f *outputFlags) formats() []string {
	return append([]string{wideOutput}, f.flags.AllowedFormats()...)
}

// addFlags adds -o, --template and --allow-missing-template-keys; not
// PrintFlags.AddFlags, whose --show-managed-fields means nothing for a
// report.
func (f *outputFlags) addFlags(cmd *cobra.Command) {
	f.flags.TemplatePrinterFlags.AddFlags(cmd)
	cmd.Flags().StringVarP(f.flags.OutputFormat, "output", "o", "",
		"Output format, one of: "+strings.Join(f.formats(), ", ")+" (tables when empty)")
	f.flags.OutputFlagSpecified = func() bool { return cmd.Flags().Changed("output") }
}

// complete resolves -o, before the command reads the cluster; an unknown
// format is an error that lists the known ones.
func (f *outputFlags) complete(*cobra.Command, []string) error {
	format := *f.flags.OutputFormat
	switch {
	case format == wideOutput:
		f.wide = true
		return nil
	case format == "" && *f.flags.TemplatePrinterFlags.TemplateArgument == "":
		return nil
	}
	p, err := f.flags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		allowed := f.formats()
		slices.Sort(allowed)
		return fmt.Errorf("unknown output format %q: -o takes one of %s, or nothing for tables", format, strings.Join(allowed, ", "))
	}
	if err != nil {
		return fmt.Errorf("output format %q: %w", format, err)
	}
	f.structured = p
	return nil
}

// print writes the report as -o asks: with tables (the Printer's), else
// its JSON form through the printer -o names.
func (f *outputFlags) print(o *Options, report any, tables func(*Printer) error) error {
	if f.structured == nil {
		return tables(&Printer{Out: o.Streams.Out, Now: o.now(), Wide: f.wide})
	}
	raw, err := json.Marshal(report)
	if err != nil {
		return fmt.Errorf("encoding the report: %w", err)
	}
	// A report is no Kubernetes object (it has no apiVersion or kind):
	// cli-runtime's printers take its JSON as it is when it comes as
	// runtime.Unknown.
	return f.structured.PrintObj(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, o.Streams.Out)
}
