package kiln_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// unbound lists the C functions this package deliberately does not call,
// each with the reason. A function the headers gain must be bound (called
// as capi.Name from this package's sources) or added here.
var unbound = map[string]string{
	"kiln_last_error":          "read by every raw wrapper right after the failing call, on the same thread: it is Error.Message",
	"kiln_status_name":         "called by Status.String in the raw layer",
	"kiln_version":             "Version returns the same numbers as kiln_version_string's text",
	"kiln_device_format":       "Device.String formats the {kind, index} pair in Go",
	"kiln_tensor_to_dlpack":    "DLPack (kiln/dlpack.h) exchanges tensors with Python and C frameworks; no Go library consumes DLPack",
	"kiln_communicator_retain": "a Go value is shared by reference (pointers to the wrapper); a second native handle to the same object adds nothing",
	"kiln_context_retain":      "a Go value is shared by reference (pointers to the wrapper); a second native handle to the same object adds nothing",
	"kiln_dataset_retain":      "a Go value is shared by reference (pointers to the wrapper); a second native handle to the same object adds nothing",
	"kiln_history_retain":      "a Go value is shared by reference (pointers to the wrapper); a second native handle to the same object adds nothing",
	"kiln_model_retain":        "a Go value is shared by reference (pointers to the wrapper); a second native handle to the same object adds nothing",
	"kiln_tensor_retain":       "a Go value is shared by reference (pointers to the wrapper); a second native handle to the same object adds nothing",
	"kiln_trainer_retain":      "a Go value is shared by reference (pointers to the wrapper); a second native handle to the same object adds nothing",
	"kiln_tensor_from_dlpack":  "DLPack (kiln/dlpack.h) exchanges tensors with Python and C frameworks; no Go library produces DLPack",
}

var declRE = regexp.MustCompile(`(?s)KILN_API\s+[^;(]*?\b(kiln_[a-z0-9_]+)\s*\(`)

func cFunctions(t *testing.T) []string {
	var names []string
	for _, h := range []string{"kiln.h", "dlpack.h"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "include", "kiln", h))
		if err != nil {
			t.Skipf("the C headers are not next to this package: %v", err)
		}
		for _, m := range declRE.FindAllSubmatch(src, -1) {
			names = append(names, string(m[1]))
		}
	}
	sort.Strings(names)
	return names
}

// packageSources is the text of this package's hand-written Go files.
func packageSources(t *testing.T) string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(src)
	}
	return b.String()
}

// rawName is SWIG's name for a C function: the prefix stripped, the first
// letter upper-cased (kiln_tensor_ones -> Tensor_ones).
func rawName(c string) string {
	r := []rune(strings.TrimPrefix(c, "kiln_"))
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func TestCAPICoverage(t *testing.T) {
	names := cFunctions(t)
	if len(names) < 100 {
		t.Fatalf("found only %d KILN_API functions: the pattern is broken", len(names))
	}
	src := packageSources(t)
	bound := 0
	seen := map[string]bool{}
	for _, c := range names {
		seen[c] = true
		used := regexp.MustCompile(`\bcapi\.` + rawName(c) + `\b`).MatchString(src)
		reason, listed := unbound[c]
		switch {
		case used && listed:
			t.Errorf("%s is bound, but also listed as unbound (%s): drop it from the list", c, reason)
		case !used && !listed:
			t.Errorf("%s is neither called as capi.%s nor listed in unbound with a reason", c, rawName(c))
		case used:
			bound++
		}
	}
	for c := range unbound {
		if !seen[c] {
			t.Errorf("unbound lists %s, which the headers do not declare", c)
		}
	}
	t.Logf("%d C functions: %d bound, %d deliberately unbound", len(names), bound, len(unbound))
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	said := regexp.MustCompile(`but\s+(\d+)\s+functions\s+deliberately\s+unbound`).FindSubmatch(readme)
	if said == nil || string(said[1]) != strconv.Itoa(len(unbound)) {
		t.Errorf("README.md should say \"but %d functions deliberately unbound\"", len(unbound))
	}
}

// Every exported identifier of the package has a doc comment (a const or
// var block's comment documents its members).
func TestGodoc(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") },
		parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	missing := 0
	report := func(pos token.Pos, name string) {
		missing++
		t.Errorf("%v: exported %s has no doc comment", fset.Position(pos), name)
	}
	for _, f := range pkgs["kiln"].Files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && d.Doc == nil && (d.Recv == nil || exportedRecv(d.Recv)) {
					report(d.Pos(), d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() && d.Doc == nil && s.Doc == nil {
							report(s.Pos(), s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
								report(n.Pos(), n.Name)
							}
						}
					}
				}
			}
		}
	}
	if missing == 0 {
		t.Log("every exported identifier is documented")
	}
}

func exportedRecv(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
