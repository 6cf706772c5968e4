package format

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateNames_AcceptAndRejectPerRules checks the graph, table and branch
// name rules: each valid name passes, each invalid one is a NameError saying why.
func TestValidateNames_AcceptAndRejectPerRules(t *testing.T) {
	for _, c := range []struct {
		what     string
		validate func(string) error
		valid    []string
		invalid  map[string]string // name -> reason fragment
	}{{
		what: "graph name", validate: ValidateGraphName,
		valid: []string{"a", "sales", "0", "a.b-c_d", strings.Repeat("a", 63)},
		invalid: map[string]string{
			"":                      "empty",
			strings.Repeat("a", 64): "longer than 63",
			"Sales":                 "must start",
			"-a":                    "must start",
			".a":                    "must start",
			"a/b":                   "may contain only",
			"aB":                    "may contain only",
			"a.":                    "must not end",
			"a b":                   "may contain only",
		},
	}, {
		what: "table name", validate: ValidateTableName,
		valid: []string{"orders", "_private", "a-b_c", "0", strings.Repeat("t", 64)},
		invalid: map[string]string{
			"":                      "empty",
			strings.Repeat("t", 65): "longer than 64",
			"-a":                    "must start",
			"Orders":                "must start",
			"a.b":                   "may contain only",
			"a/b":                   "may contain only",
		},
	}, {
		what: "branch name", validate: ValidateBranchName,
		valid: []string{"main", "feature/x", "Feature/X-1.2_b", "a/b/c", "v1.0", strings.Repeat("b", 128),
			// 26 characters but with letters outside Crockford base32 (I, L, O, U).
			"abcdefghijklmnopqrstuvwxyz",
			// 25 Crockford characters: one short of ULID-shaped.
			"0123456789ABCDEFGHJKMNPQR"},
		invalid: map[string]string{
			"":                                "empty",
			strings.Repeat("b", 129):          "longer than 128",
			"a//b":                            "segment 2 is empty",
			"/a":                              "segment 1 is empty",
			"a/":                              "segment 2 is empty",
			"a..b":                            "contains \"..\"",
			"a/../b":                          "contains \"..\"",
			"-a":                              "must start",
			"a/.b":                            "segment 2 must start",
			"a b":                             "may contain only",
			"a~b":                             "may contain only",
			"a.":                              "must not end in '.'",
			"x/ref.json":                      "\".json\"",
			"x/ref.JSON/y":                    "\".json\"",
			"x.lock":                          "\".lock\"",
			"01J0000000000000000000MA1N":      "ULID-shaped",
			"team/01j0000000000000000000ma1n": "segment 2 is ULID-shaped",
			"a.01J0000000000000000000MA1N/b":  "reserved for native names",
			"x/a.01J0000000000000000000MA1N":  "reserved for native names",
		},
	}} {
		for _, name := range c.valid {
			if err := c.validate(name); err != nil {
				t.Errorf("%s %q: %v, want nil", c.what, name, err)
			}
		}
		for name, why := range c.invalid {
			assertNameError(t, c.validate(name), c.what, name, why)
		}
	}
}

func TestValidateTagName_UsesBranchRulesAndSaysTag(t *testing.T) {
	if err := ValidateTagName("release/v1.0"); err != nil {
		t.Fatalf("ValidateTagName: %v", err)
	}
	assertNameError(t, ValidateTagName("a//b"), "tag name", "a//b", "empty")
}

func TestParseNative_SplitsAtLastDotAndValidatesBothParts(t *testing.T) {
	native := NativeName("feature/v1.2", treeFeature)
	logical, tree, err := ParseNative(native)
	if err != nil || logical != "feature/v1.2" || tree != treeFeature {
		t.Fatalf("ParseNative(%q) = %q, %s, %v", native, logical, tree, err)
	}
	invalid := map[string]string{
		"main":                              "missing",
		"main.01j0000000000000000000ma1n":   "canonical upper case",
		"main.00000000000000000000000000":   "zero ULID",
		"main.01J0000000000000000000MA1":    "not 26 characters",
		"a//b.01J0000000000000000000MA1N":   "logical part",
		".01J0000000000000000000MA1N":       "logical part",
		"main.01J0000000000000000000MA1N.x": "logical part",
		"main.x":                            "ULID part",
	}
	for name, why := range invalid {
		_, _, err := ParseNative(name)
		assertNameError(t, err, "native branch name", name, why)
	}
}

func TestPrefixDisjoint_OnlySlashBoundaryPrefixesConflict(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"a", "a", false},
		{"a", "a/b", false},
		{"a/b", "a", false},
		{"a/b", "a/b/c/d", false},
		{"a", "ab", true},
		{"a", "b/a", true},
		{"a.b", "a", true},
		{"a/b", "a/c", true},
	}
	for _, c := range cases {
		if got := PrefixDisjoint(c.a, c.b); got != c.want {
			t.Errorf("PrefixDisjoint(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestParseCommitID_RoundTripsAndRejectsNonCanonical(t *testing.T) {
	d := Digest{0x01, 0x23, 0xab}
	for _, id := range []CommitID{{Tree: treeMain, Seq: 0, Digest: d}, {Tree: treeFeature, Seq: 42, Digest: d}, {Tree: treeOther, Seq: 1<<63 - 1, Digest: d}, {Tree: treeMain, Seq: 3, Digest: Digest{0xff}}} {
		got, err := ParseCommitID(id.String())
		if err != nil || got != id {
			t.Errorf("ParseCommitID(%q) = %v, %v", id.String(), got, err)
		}
	}
	invalid := map[string]string{
		"01J0000000000000000000MA1N":                                     "missing '-'",
		"01J0000000000000000000MA1N-":                                    "seq",
		"01J0000000000000000000MA1N-01":                                  "seq",
		"01J0000000000000000000MA1N-+1":                                  "seq",
		"01J0000000000000000000MA1N--1":                                  "seq",
		"01J0000000000000000000MA1N-1-2":                                 "digest: not 32 hex digits",
		"01J0000000000000000000MA1N-1-0123AB00000000000000000000000000":  "digest: not lower-case hex",
		"01J0000000000000000000MA1N-1-00000000000000000000000000000000":  "zero digest",
		"01J0000000000000000000MA1N-01-0123ab00000000000000000000000000": "seq",
		"01J0000000000000000000MA1N-1":                                   "missing '-' and the digest",
		"01j0000000000000000000ma1n-1-0123ab00000000000000000000000000":  "canonical upper case",
		"00000000000000000000000000-1-0123ab00000000000000000000000000":  "zero ULID",
		"01J0000000000000000000MA1N-99999999999999999999":                "seq",
	}
	for s, why := range invalid {
		_, err := ParseCommitID(s)
		assertNameError(t, err, "commit id", s, why)
	}
}

func assertNameError(t *testing.T, err error, what, name, why string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidName) {
		t.Errorf("%s %q: error %v does not match ErrInvalidName", what, name, err)
		return
	}
	var ne *NameError
	if !errors.As(err, &ne) {
		t.Errorf("%s %q: error %v is not a *NameError", what, name, err)
		return
	}
	if ne.What != what || ne.Name != name || !strings.Contains(ne.Reason, why) {
		t.Errorf("%s %q: got NameError{What: %q, Name: %q, Reason: %q}, want reason containing %q", what, name, ne.What, ne.Name, ne.Reason, why)
	}
}
