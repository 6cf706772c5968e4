package conncfg

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/pflag"
)

// A profile is a file of connection settings that the CLI finds without a
// flag: a JSON object from flag names to values, e.g.
//
//	{"temporal-address": "127.0.0.1:7233", "store-dir": "/home/me/graft/.graft-data",
//	 "db-schema": "graft_dev", "database-url": "postgres://postgres@127.0.0.1:5432/test"}
//
// `graft dev` writes one for the stack it runs. A profile fills only what the
// command line and the environment leave unset: flag, then variable, then
// profile, then default. "database-url" stands for DATABASE_URL, which has no
// flag; the file is written 0600.

// EnvProfile names the variable that points at the profile file. Empty
// turns the profile off.
const EnvProfile = "GRAFT_CONFIG"

// ProfileDatabaseURL is the profile key of DATABASE_URL.
const ProfileDatabaseURL = "database-url"

// Profile is a profile file's settings.
type Profile struct {
	Path   string            // the file read
	Values map[string]string // flag names (and ProfileDatabaseURL) to values
}

// DefaultProfilePath is where the profile is looked for: $GRAFT_CONFIG, else
// $XDG_CONFIG_HOME/graft/config.json, else $HOME/.config/graft/config.json.
// It is "" when GRAFT_CONFIG is set empty or no directory is known.
func DefaultProfilePath(lookup LookupEnv) string {
	if p, ok := lookup(EnvProfile); ok {
		return p
	}
	if d, ok := lookup("XDG_CONFIG_HOME"); ok && d != "" {
		return filepath.Join(d, "graft", "config.json")
	}
	if h, ok := lookup("HOME"); ok && h != "" {
		return filepath.Join(h, ".config", "graft", "config.json")
	}
	return ""
}

// ReadProfile reads the profile at path. A missing file (or path "") is no
// profile: nil and no error. A key that is not a known setting is an error
// naming the file and the key.
func ReadProfile(path string) (*Profile, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read profile %s ($%s): %w", path, EnvProfile, err)
	}
	var values map[string]string
	if err := json.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("profile %s ($%s): want a JSON object of setting names to strings: %v", path, EnvProfile, err)
	}
	unknown := slices.DeleteFunc(slices.Sorted(maps.Keys(values)), func(k string) bool {
		_, ok := sharedEnv[k]
		return ok || k == ProfileDatabaseURL
	})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("profile %s: unknown setting(s) %q; the settings are the global flags' names and %q",
			path, unknown, ProfileDatabaseURL)
	}
	return &Profile{Path: path, Values: values}, nil
}

// WriteProfile writes values as the profile at path, replacing it whole and
// creating its directory; the file is readable by its owner only.
func WriteProfile(path string, values map[string]string) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("write profile %s: %w", path, err)
		}
	}()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(values, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if err := errors.Join(err, tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Apply sets every flag of fs that src does not name as given from the
// profile, and records the profile as its source. The error names each
// setting whose value did not parse, with the file.
func (p *Profile) Apply(fs *pflag.FlagSet, src *Sources) error {
	if p == nil {
		return nil
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(p.Values)) {
		f := fs.Lookup(name)
		if f == nil || src.Given(name) {
			continue
		}
		if err := setValue(f, p.Values[name]); err != nil {
			errs = append(errs, fmt.Errorf("%s in profile %s: %q: %v", name, p.Path, p.Values[name], err))
			continue
		}
		src.from[name] = fmt.Sprintf("%s (profile %s)", name, p.Path)
	}
	return errors.Join(errs...)
}

// DatabaseURL is the profile's database URL, "" when it has none.
func (p *Profile) DatabaseURL() string {
	if p == nil {
		return ""
	}
	return p.Values[ProfileDatabaseURL]
}
