package client_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/graftworks/graft"

// publicPackages are the packages a service outside this module imports.
var publicPackages = []string{module + "/client", module + "/client/outcome"}

// loadExported type-checks pkgs from the compiler's export data, which `go
// list -export` builds (or finds in the build cache): no tool beyond the go
// command.
func loadExported(t *testing.T, pkgs ...string) map[string]*types.Package {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-export", "-json=ImportPath,Export"}, pkgs...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	exports := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	loaded := map[string]*types.Package{}
	for _, p := range pkgs {
		pkg, err := imp.Import(p)
		if err != nil {
			t.Fatalf("import %s: %v", p, err)
		}
		loaded[p] = pkg
	}
	return loaded
}

func isInternal(path string) bool {
	return strings.Contains(path+"/", "/internal/")
}

// surface walks every type a package's exported identifiers expose: the
// types of exported functions, variables and constants, and — through every
// named type of this module — exported fields and the signatures of exported
// methods. Types of packages outside the module are their own business.
type surface struct {
	seen  map[types.Type]bool
	found map[string][]string // package path → where it shows
	// activities lists the types of package activities the surface shows:
	// contract types services see belong to workflows/ or client/.
	activities []string
}

func (s *surface) visit(t types.Type, where string) {
	if t == nil || s.seen[t] {
		return
	}
	s.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		s.visit(types.Unalias(t), where)
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return
		}
		path := obj.Pkg().Path()
		if isInternal(path) {
			s.found[path] = append(s.found[path], where+" ("+obj.Name()+")")
			return
		}
		if path == module+"/activities" {
			s.activities = append(s.activities, where+" ("+obj.Name()+")")
		}
		for i := range t.TypeArgs().Len() {
			s.visit(t.TypeArgs().At(i), where)
		}
		if path != module && !strings.HasPrefix(path, module+"/") {
			return
		}
		name := path[strings.LastIndex(path, "/")+1:] + "." + obj.Name()
		s.visit(t.Underlying(), name)
		ms := types.NewMethodSet(types.NewPointer(t))
		for i := range ms.Len() {
			if m := ms.At(i).Obj(); m.Exported() {
				s.visit(m.Type(), name+"."+m.Name())
			}
		}
	case *types.Pointer:
		s.visit(t.Elem(), where)
	case *types.Slice:
		s.visit(t.Elem(), where)
	case *types.Array:
		s.visit(t.Elem(), where)
	case *types.Map:
		s.visit(t.Key(), where)
		s.visit(t.Elem(), where)
	case *types.Chan:
		s.visit(t.Elem(), where)
	case *types.Signature:
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tup.Len() {
				s.visit(tup.At(i).Type(), where)
			}
		}
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				s.visit(f.Type(), where+"."+f.Name())
			}
		}
	case *types.Interface:
		for i := range t.NumMethods() {
			s.visit(t.Method(i).Type(), where+"."+t.Method(i).Name())
		}
	}
}

// TestPublicSurface_NamesNoInternalPackage fails when an exported identifier
// of client/ or client/outcome — or anything reachable from one, however
// deep — names a type of an internal package, which no other module could
// then use.
func TestPublicSurface_NamesNoInternalPackage(t *testing.T) {
	pkgs := loadExported(t, publicPackages...)
	s := &surface{seen: map[types.Type]bool{}, found: map[string][]string{}}
	objects := 0
	for _, path := range publicPackages {
		scope := pkgs[path].Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			objects++
			where := path[strings.LastIndex(path, "/")+1:] + "." + name
			if tn, ok := obj.(*types.TypeName); ok {
				s.visit(tn.Type(), where)
				continue
			}
			s.visit(obj.Type(), where)
		}
	}
	if objects < 50 {
		t.Fatalf("only %d exported identifiers found: the walk is not looking at the client", objects)
	}
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range s.found {
			if !yield(p) {
				return
			}
		}
	}) {
		uses := s.found[path]
		slices.Sort(uses)
		t.Errorf("internal package %s is part of the public surface:\n  %s", path, strings.Join(slices.Compact(uses), "\n  "))
	}
	if len(s.activities) > 0 {
		slices.Sort(s.activities)
		t.Errorf("types of package activities are part of the public surface; a contract type belongs to workflows/ or client/:\n  %s",
			strings.Join(slices.Compact(s.activities), "\n  "))
	}
}

// TestPublicSurface_WalkFindsAnInternalType proves the walk reports a leak:
// a package of this module that does expose an internal type.
func TestPublicSurface_WalkFindsAnInternalType(t *testing.T) {
	const leaky = module + "/cmd/internal/conncfg" // Settings.S3 is an internal conncfg.S3Config
	pkgs := loadExported(t, leaky)
	s := &surface{seen: map[types.Type]bool{}, found: map[string][]string{}}
	// Walk it as if it were public: its own types count as the module's.
	tn := pkgs[leaky].Scope().Lookup("Settings").(*types.TypeName)
	s.visit(tn.Type().Underlying(), "conncfg.Settings")
	if len(s.found[leaky]) == 0 {
		t.Fatalf("the walk found no internal type in conncfg.Settings: %v", s.found)
	}
}
