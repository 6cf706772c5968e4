package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/graftworks/graft/cmd/internal/conncfg"
)

// Config is the resolved global configuration of one graft invocation. Flag
// and environment names are graft-worker's, so one environment configures both.
type Config struct {
	// Settings reach Temporal, the store and the ledger; conncfg.Settings
	// names each field's flag and variable. Defaults to conncfg.Defaults().
	conncfg.Settings
	// Output is text or json (--output/-o, GRAFT_OUTPUT). Defaults to text.
	Output string
}

const (
	outputText = "text"
	outputJSON = "json"
)

// defaultConfig is where every invocation starts; the defaults are the worker's.
func defaultConfig() Config {
	return Config{Settings: conncfg.Defaults(), Output: outputText}
}

// flagOutput is the one global flag graft-worker does not share.
const flagOutput = "output"

// envNames maps each global flag to its environment variable.
var envNames = conncfg.EnvNames(flagOutput)

// LookupEnv reads one environment variable, like os.LookupEnv.
type LookupEnv = conncfg.LookupEnv

func addGlobalFlags(fs *pflag.FlagSet, c *Config) {
	c.AddTemporalFlags(fs)
	c.AddStoreFlags(fs)
	c.AddLedgerFlags(fs)
	fs.StringVarP(&c.Output, flagOutput, "o", c.Output, envNames.Usage(flagOutput, "output format: text or json"))
}

// resolveConfig applies the environment, then the profile (the file `graft
// dev` writes, found without a flag), to c and checks it. Every error names
// the flag, variable or profile setting it came from. TLS files are read only
// when Temporal is dialled, so a command that does not need Temporal does not
// need them. The sources say where each value came from.
func resolveConfig(fs *pflag.FlagSet, c *Config, lookup LookupEnv) (*conncfg.Sources, error) {
	s, err := envNames.Bind(fs, lookup)
	if err != nil {
		return s, err
	}
	prof, err := conncfg.ReadProfile(conncfg.DefaultProfilePath(lookup))
	if err != nil {
		return s, err
	}
	if err := prof.Apply(fs, s); err != nil {
		return s, err
	}
	if u := prof.DatabaseURL(); u != "" {
		c.DatabaseURL = u
	}
	c.ReadDatabaseURL(lookup) // $DATABASE_URL wins over the profile
	var errs []error
	if c.Output != outputText && c.Output != outputJSON {
		errs = append(errs, fmt.Errorf("%s: want text or json, got %q", s.Name(flagOutput), c.Output))
	}
	errs = append(errs, c.ValidateTemporal(s), c.ValidateLedger(s), c.ValidateStore(s))
	return s, errors.Join(errs...)
}
