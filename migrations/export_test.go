package migrations

import (
	"context"
	"io/fs"
)

// ApplyFS and StatusFS run Apply and Status over a test's own migration set.
var (
	ApplyFS  = apply
	StatusFS = status
)

// DownAll rolls the schema back to version 0 with the embedded migrations.
func DownAll(ctx context.Context, databaseURL, schema string) error {
	return downAll(ctx, databaseURL, schema, embedded)
}

func downAll(ctx context.Context, databaseURL, schema string, fsys fs.FS) error {
	s, err := open(ctx, databaseURL, schema, fsys)
	if err != nil {
		return err
	}
	defer s.db.Close()
	_, err = s.provider.DownTo(ctx, 0)
	return err
}
