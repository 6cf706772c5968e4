package conncfg

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// LookupEnv reads one environment variable, like os.LookupEnv.
type LookupEnv func(name string) (string, bool)

// Env maps each flag that has an environment variable to the variable's name.
type Env map[string]string

// EnvNames returns the environment variables of the shared flags and of
// more: GRAFT_ and the flag's name in upper case, '_' for '-'.
func EnvNames(more ...string) Env {
	e := Env{}
	for _, f := range slices.Concat(sharedFlags, more) {
		e[f] = "GRAFT_" + strings.ToUpper(strings.ReplaceAll(f, "-", "_"))
	}
	return e
}

// Usage appends flag's environment variable to its usage text.
func (e Env) Usage(flag, usage string) string {
	return usage + " [$" + e[flag] + "]"
}

// Bind fills every flag of fs not given on the command line from its
// variable in e. An empty variable counts as unset, except for the flags in
// emptyIsValue. The error names each variable whose value did not parse.
func (e Env) Bind(fs *pflag.FlagSet, lookup LookupEnv, emptyIsValue ...string) (*Sources, error) {
	s := &Sources{from: map[string]string{}, env: e}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			s.from[f.Name] = "--" + f.Name
			return
		}
		env, ok := e[f.Name]
		if !ok {
			return
		}
		v, set := lookup(env)
		if !set || (v == "" && !slices.Contains(emptyIsValue, f.Name)) {
			return
		}
		if err := setValue(f, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", env, v, err))
			return
		}
		s.from[f.Name] = env
	})
	return s, errors.Join(errs...)
}

// Sources records where each flag's value came from, so an error names it
// the way the operator wrote it. A nil *Sources knows of no source.
type Sources struct {
	from map[string]string // flag → "--flag" or "ENV_NAME"
	env  Env
}

// Name is how an error refers to flag: as the operator gave it ("--flag" or
// "ENV_NAME"), or as "--flag (or ENV_NAME)" when neither set it.
func (s *Sources) Name(flag string) string {
	if s == nil {
		return "--" + flag
	}
	if n, ok := s.from[flag]; ok {
		return n
	}
	if env, ok := s.env[flag]; ok {
		return "--" + flag + " (or " + env + ")"
	}
	return "--" + flag
}

// Check is the error "NAME: message" about flag, NAME as Name gives it, when
// bad holds; else nil.
func (s *Sources) Check(bad bool, flag, format string, args ...any) error {
	if !bad {
		return nil
	}
	return fmt.Errorf("%s: %w", s.Name(flag), fmt.Errorf(format, args...))
}

// Given reports whether the command line or the environment set flag.
func (s *Sources) Given(flag string) bool {
	if s == nil {
		return false
	}
	_, ok := s.from[flag]
	return ok
}

// setValue sets a flag from a variable's or a profile's text. A boolean
// also takes yes/no and on/off, and a bad one says what it wants rather than
// strconv's parse error; a bad duration says what one looks like.
func setValue(f *pflag.Flag, v string) error {
	switch f.Value.Type() {
	case "bool":
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "t", "true", "yes", "y", "on":
			return f.Value.Set("true")
		case "0", "f", "false", "no", "n", "off":
			return f.Value.Set("false")
		}
		return errors.New("want true or false (also yes/no, on/off, 1/0)")
	case "duration":
		if err := f.Value.Set(v); err != nil {
			return errors.New(`want a duration such as "10s", "2m" or "1h30m"`)
		}
		return nil
	}
	return f.Value.Set(v)
}
