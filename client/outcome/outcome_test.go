package outcome

import (
	"errors"
	"testing"
)

func TestExitCode_EveryOutcomeHasItsDocumentedCode(t *testing.T) {
	want := map[Outcome]int{
		Created: 0, Done: 0, Merged: 0, Adopted: 0, AlreadyUpToDate: 0, Deleted: 0,
		Invalid: 2, Unpublished: 3, InDoubt: 4, Conflict: 5, NotFound: 6, NotRetained: 7, Refused: 8, Abandoned: 10, Rejected: 11,
	}
	if len(want) != len(All) {
		t.Fatalf("All lists %d outcomes, the table %d", len(All), len(want))
	}
	for _, o := range All {
		if got := o.ExitCode(); got != want[o] {
			t.Errorf("%s exits %d, want %d", o, got, want[o])
		}
		if o.Success() != (want[o] == 0) {
			t.Errorf("%s: Success() = %v", o, o.Success())
		}
	}
	if Outcome("failed").ExitCode() != ExitFailure || Outcome("failed").Valid() {
		t.Errorf("an outcome outside the vocabulary must exit %d and be invalid", ExitFailure)
	}
}

func TestError_MatchesItsSentinelAndCarriesTheOperation(t *testing.T) {
	err := error(Errorf(InDoubt, "op-1", "ref put %s unknown", "x"))
	if !errors.Is(err, ErrInDoubt) || errors.Is(err, ErrConflict) {
		t.Fatalf("%v matches the wrong sentinels", err)
	}
	if o, ok := Of(err); !ok || o != InDoubt {
		t.Fatalf("Of = %q, %v", o, ok)
	}
	if got := err.Error(); got != "in_doubt: ref put x unknown (operation op-1)" {
		t.Fatalf("message %q", got)
	}
}

func TestError_NamesItsOperationOnce_EvenWhenTheMessageNamesAnother(t *testing.T) {
	e := Errorf(Conflict, "op-mine", "tag %q already names another commit, C (operation op-theirs)", "v1")
	if got := e.Error(); got != `conflict: tag "v1" already names another commit, C (operation op-theirs); this request is operation op-mine` {
		t.Fatalf("Error() = %q", got)
	}
	if got := Errorf(InDoubt, "op-1", "ref put answered ambiguously").Error(); got != "in_doubt: ref put answered ambiguously (operation op-1)" {
		t.Fatalf("Error() = %q", got)
	}
}
