package client

import (
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
)

// Every request is checked here with the rules the workflows apply before
// anything is contacted: a bad input is an *outcome.Error with outcome
// invalid, and no workflow is started, no ledger row written.

func invalid(field string, err error) error {
	if err == nil {
		return nil
	}
	msg := format.Describe(err)
	if field != "" {
		msg = field + ": " + msg
	}
	return outcome.Errorf(outcome.Invalid, "", "%s", msg)
}

func firstInvalid(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkGraph(graph string) error    { return invalid("", format.ValidateGraphName(graph)) }
func checkBranch(branch string) error  { return invalid("", format.ValidateBranchName(branch)) }
func checkTag(field, tag string) error { return invalid(field, format.ValidateTagName(tag)) }

// checkCommit checks a commit id, when given.
func checkCommit(field, id string) error {
	if id == "" {
		return nil
	}
	_, err := format.ParseCommitID(id)
	return invalid(field, err)
}

// checkCommitText checks a commit's author, when given, and message.
func checkCommitText(author, message string) error {
	var err error
	if author != "" {
		err = format.ValidateAuthor(author)
	}
	return invalid("", firstInvalid(err, format.ValidateMessage(message)))
}

// checkKey checks an idempotency key (an operation id), when given.
func checkKey(key string) error {
	if key == "" {
		return nil
	}
	return invalid("idempotency key", format.ValidateOp(key))
}

// Validate checks the request as graft.CreateBranch would, without contacting anything.
func (r CreateBranchRequest) Validate() error {
	if r.FromBranch != "" && (r.FromCommit != "" || r.FromTag != "") || r.FromCommit != "" && r.FromTag != "" {
		return outcome.Errorf(outcome.Invalid, "", "give at most one source: a branch, a commit or a tag")
	}
	var from error
	switch {
	case r.FromBranch != "":
		from = invalid("source branch", format.ValidateBranchName(r.FromBranch))
	case r.FromCommit != "":
		from = checkCommit("source commit", r.FromCommit)
	case r.FromTag != "":
		from = checkTag("source tag", r.FromTag)
	}
	return firstInvalid(checkGraph(r.Graph), checkBranch(r.Branch), from, checkCommitText(r.Author, r.Message), checkKey(r.IdempotencyKey))
}

// Validate checks the request as graft.Merge would, without contacting anything.
func (r MergeRequest) Validate() error {
	if err := firstInvalid(checkGraph(r.Graph), invalid("source", format.ValidateBranchName(r.Source)),
		invalid("target", format.ValidateBranchName(r.Target))); err != nil {
		return err
	}
	if r.Source == r.Target {
		return outcome.Errorf(outcome.Invalid, "", "cannot merge %q into itself", r.Source)
	}
	if r.WaitTimeout < 0 {
		return outcome.Errorf(outcome.Invalid, "", "wait timeout must not be negative")
	}
	return firstInvalid(checkCommit("expected head", r.ExpectedHead), checkCommitText(r.Author, r.Message), checkKey(r.IdempotencyKey))
}

// Validate checks the request as graft.Restore would, without contacting anything.
func (r RestoreRequest) Validate() error {
	if err := firstInvalid(checkGraph(r.Graph), checkBranch(r.Branch)); err != nil {
		return err
	}
	var to error
	switch {
	case (r.ToCommit == "") == (r.ToTag == ""):
		return outcome.Errorf(outcome.Invalid, "", "give exactly one of a commit id and a tag to restore to")
	case r.ToCommit != "":
		to = checkCommit("commit", r.ToCommit)
	default:
		to = checkTag("tag", r.ToTag)
	}
	if r.NoBackup && r.BackupTag != "" {
		return outcome.Errorf(outcome.Invalid, "", "no backup and a backup tag name are mutually exclusive")
	}
	var backup error
	if r.BackupTag != "" {
		backup = checkTag("backup tag", r.BackupTag)
	}
	return firstInvalid(to, checkCommit("expected head", r.ExpectedHead), backup,
		checkCommitText(r.Author, r.Message), checkKey(r.IdempotencyKey))
}

// Validate checks the request as graft.DeleteBranch would, without contacting anything.
func (r DeleteBranchRequest) Validate() error {
	return firstInvalid(checkGraph(r.Graph), checkBranch(r.Branch), checkKey(r.IdempotencyKey))
}

// Validate checks the request as graft.CreateTag would, without contacting anything.
func (r CreateTagRequest) Validate() error {
	if err := firstInvalid(checkGraph(r.Graph), checkTag("", r.Name)); err != nil {
		return err
	}
	if r.Commit != "" && r.Branch != "" {
		return outcome.Errorf(outcome.Invalid, "", "give a commit id or a branch, not both")
	}
	var what error
	if r.Branch != "" {
		what = invalid("branch", format.ValidateBranchName(r.Branch))
	}
	return firstInvalid(checkCommit("commit", r.Commit), what, checkKey(r.IdempotencyKey))
}

// Validate checks the request as graft.DeleteTag would, without contacting anything.
func (r DeleteTagRequest) Validate() error {
	return firstInvalid(checkGraph(r.Graph), checkTag("", r.Name), checkKey(r.IdempotencyKey))
}

// Validate checks the request as graft.InitGraph would, without contacting anything.
func (r InitGraphRequest) Validate() error {
	return firstInvalid(checkGraph(r.Graph), checkCommitText(r.Author, ""), checkKey(r.IdempotencyKey))
}

// Validate checks the request as graft.RepairBranch would, without contacting anything.
func (r RepairBranchRequest) Validate() error {
	return firstInvalid(checkGraph(r.Graph), checkBranch(r.Branch), invalid("keep", format.ValidateNative(r.Keep)), checkKey(r.IdempotencyKey))
}
