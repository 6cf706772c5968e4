package main

import (
	"errors"

	"github.com/spf13/pflag"

	"github.com/graftworks/graft/cmd/internal/conncfg"
)

// Config is the resolved global configuration of one graft invocation. Flag
// and environment names are graft-worker's, so one environment configures both.
type Config struct {
	conncfg.Settings
	Output string // text or json (--output/-o, GRAFT_OUTPUT)
}

const (
	outputText = "text"
	outputJSON = "json"
)

func defaultConfig() Config {
	return Config{Settings: conncfg.Defaults(), Output: outputText}
}

// flagOutput is the one global flag graft-worker does not share.
const flagOutput = "output"

var envNames = conncfg.EnvNames(flagOutput)

func addGlobalFlags(fs *pflag.FlagSet, c *Config) {
	c.AddTemporalFlags(fs)
	c.AddStoreFlags(fs)
	c.AddLedgerFlags(fs)
	fs.StringVarP(&c.Output, flagOutput, "o", c.Output, envNames.Usage(flagOutput, "output format: text or json"))
}

// resolveConfig applies the environment, then the profile (the file `graft
// dev` writes, found without a flag), to c and checks it; every error names
// where its setting came from. TLS files are read only when Temporal is
// dialled, so a command that does not need Temporal does not need them.
func resolveConfig(fs *pflag.FlagSet, c *Config, lookup conncfg.LookupEnv) (*conncfg.Sources, error) {
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
	badOutput := c.Output != outputText && c.Output != outputJSON
	return s, errors.Join(s.Check(badOutput, flagOutput, "want text or json, got %q", c.Output),
		c.ValidateTemporal(s), c.ValidateLedger(s), c.ValidateStore(s))
}
