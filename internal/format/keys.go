package format

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"
)

// Key builders assume valid inputs; parsers validate.
//
//	{graph}/graph.json                                         graph record
//	{graph}/tables/{table}/versions/{ULID}.json                table version
//	{graph}/tables/{table}/chunks/{sha256}.json                manifest chunk
//	{graph}/tables/{table}/objects/{ULID}                      data object
//	{graph}/trees/{tree ULID}/commits/{invseq}-{digest}.json   commit
//	{graph}/chunks/{sha256}.json                               pins and lineage chunk
//	{graph}/refs/branches/{native}.json                        branch ref
//	{graph}/refs/tags/{name}.json                              tag
//	{graph}/uploads/{table}/{object ULID}.json                 upload record

// GraphPrefix is the prefix of every key of graph: "{graph}/".
func GraphPrefix(graph string) string { return graph + "/" }

// GraphKey is the key of the graph record.
func GraphKey(graph string) string { return graph + "/graph.json" }

// TablePrefix is the prefix of every key of one table.
func TablePrefix(graph, table string) string { return graph + "/tables/" + table + "/" }

// TableVersionsPrefix is the prefix of a table's versions.
func TableVersionsPrefix(graph, table string) string { return TablePrefix(graph, table) + "versions/" }

// TableVersionKey is the key of a table version.
func TableVersionKey(graph, table string, version ulid.ULID) string {
	return TableVersionsPrefix(graph, table) + version.String() + ".json"
}

// TableObjectsPrefix is the prefix of a table's data objects.
func TableObjectsPrefix(graph, table string) string { return TablePrefix(graph, table) + "objects/" }

// ObjectKey is the key of a data object.
func ObjectKey(graph, table string, object ulid.ULID) string {
	return TableObjectsPrefix(graph, table) + object.String()
}

// ParseObjectKey returns the graph, table and object ULID a data object key names.
func ParseObjectKey(key string) (graph, table string, object ulid.ULID, err error) {
	bad := func(why string) error { return &NameError{What: "data object key", Name: key, Reason: why} }
	graph, rest, ok := strings.Cut(key, "/tables/")
	if !ok {
		return "", "", ulid.ULID{}, bad("missing /tables/")
	}
	table, name, ok := strings.Cut(rest, "/objects/")
	if !ok {
		return "", "", ulid.ULID{}, bad("missing /objects/")
	}
	if err := ValidateGraphName(graph); err != nil {
		return "", "", ulid.ULID{}, bad("graph: " + reason(err))
	}
	if err := ValidateTableName(table); err != nil {
		return "", "", ulid.ULID{}, bad("table: " + reason(err))
	}
	object, why := parseULID(name)
	if why != "" {
		return "", "", ulid.ULID{}, bad("object: " + why)
	}
	return graph, table, object, nil
}

// UploadsPrefix is the prefix of a graph's upload records.
func UploadsPrefix(graph string) string { return graph + "/uploads/" }

// UploadKey is the key of the record of a multipart upload of data object
// object of table (docs/format.md, *Upload records*).
func UploadKey(graph, table string, object ulid.ULID) string {
	return UploadsPrefix(graph) + table + "/" + object.String() + ".json"
}

// ParseUploadKey returns the table and object ULID an upload record key of graph names.
func ParseUploadKey(graph, key string) (table string, object ulid.ULID, err error) {
	bad := func(why string) error { return &NameError{What: "upload record key", Name: key, Reason: why} }
	rest, ok := strings.CutPrefix(key, UploadsPrefix(graph))
	if !ok {
		return "", ulid.ULID{}, bad("not under " + UploadsPrefix(graph))
	}
	table, name, ok := strings.Cut(rest, "/")
	if !ok {
		return "", ulid.ULID{}, bad("missing the table segment")
	}
	if err := ValidateTableName(table); err != nil {
		return "", ulid.ULID{}, bad("table: " + reason(err))
	}
	name, ok = strings.CutSuffix(name, ".json")
	if !ok {
		return "", ulid.ULID{}, bad("name does not end in \".json\"")
	}
	object, why := parseULID(name)
	if why != "" {
		return "", ulid.ULID{}, bad("object: " + why)
	}
	return table, object, nil
}

// TreePrefix is the prefix of every key of one tree.
func TreePrefix(graph string, tree ulid.ULID) string { return graph + "/trees/" + tree.String() + "/" }

// TreeCommitsPrefix is the prefix of a tree's commits, which list newest first.
func TreeCommitsPrefix(graph string, tree ulid.ULID) string {
	return TreePrefix(graph, tree) + "commits/"
}

// InvSeq is commit seq's key segment: MaxInt64-seq in 19 digits, newest first.
func InvSeq(seq int64) string { return fmt.Sprintf("%019d", math.MaxInt64-seq) }

// CommitIDKey is the key of commit id: "{invseq}-{digest}.json" under TreeCommitsPrefix.
func CommitIDKey(graph string, id CommitID) string {
	return TreeCommitsPrefix(graph, id.Tree) + InvSeq(id.Seq) + "-" + id.Digest.String() + ".json"
}

// ParseCommitKey returns the commit id a commit key of graph names, or a NameError.
func ParseCommitKey(graph, key string) (CommitID, error) {
	bad := func(why string) error { return &NameError{What: "commit key", Name: key, Reason: why} }
	rest, ok := strings.CutPrefix(key, graph+"/trees/")
	if !ok {
		return CommitID{}, bad("not under " + graph + "/trees/")
	}
	treeText, rest, ok := strings.Cut(rest, "/commits/")
	if !ok {
		return CommitID{}, bad("missing /commits/")
	}
	tree, why := parseULID(treeText)
	if why != "" {
		return CommitID{}, bad("tree: " + why)
	}
	inv, ok := strings.CutSuffix(rest, ".json")
	if !ok {
		return CommitID{}, bad("name does not end in \".json\"")
	}
	const shape = "name is not 19 digits, '-', a digest and \".json\""
	inv, digestText, ok := strings.Cut(inv, "-")
	if !ok {
		return CommitID{}, bad(shape)
	}
	digest, why := parseDigest(digestText)
	if why != "" {
		return CommitID{}, bad("digest: " + why)
	}
	if len(inv) != 19 || strings.Trim(inv, "0123456789") != "" {
		return CommitID{}, bad(shape)
	}
	n, err := strconv.ParseInt(inv, 10, 64)
	if err != nil {
		return CommitID{}, bad("inverted seq out of range")
	}
	return CommitID{Tree: tree, Seq: math.MaxInt64 - n, Digest: digest}, nil
}

// BranchRefsPrefix is the prefix of every branch ref of graph.
func BranchRefsPrefix(graph string) string { return graph + "/refs/branches/" }

// BranchRefKey is the key of the ref of a native branch.
func BranchRefKey(graph, native string) string { return BranchRefsPrefix(graph) + native + ".json" }

// BranchRefPrefix lists the refs of logical's incarnations:
// "{graph}/refs/branches/{logical}.". It also matches longer names such as
// "a.b" for "a": filter with ParseBranchRefKey.
func BranchRefPrefix(graph, logical string) string { return BranchRefsPrefix(graph) + logical + "." }

// ParseBranchRefKey returns the native name a ref key of graph names.
func ParseBranchRefKey(graph, key string) (native string, err error) {
	return parseJSONKey("branch ref key", BranchRefsPrefix(graph), key, ValidateNative)
}

// TagsPrefix is the prefix of every tag of graph.
func TagsPrefix(graph string) string { return graph + "/refs/tags/" }

// TagKey is the key of a tag.
func TagKey(graph, name string) string { return TagsPrefix(graph) + name + ".json" }

// ParseTagKey returns the tag name a tag key of graph names.
func ParseTagKey(graph, key string) (name string, err error) {
	return parseJSONKey("tag key", TagsPrefix(graph), key, ValidateTagName)
}

// parseJSONKey returns the name in prefix + name + ".json" that validate accepts.
func parseJSONKey(what, prefix, key string, validate func(string) error) (string, error) {
	bad := func(why string) error { return &NameError{What: what, Name: key, Reason: why} }
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", bad("not under " + prefix)
	}
	name, ok := strings.CutSuffix(rest, ".json")
	if !ok {
		return "", bad("missing \".json\" suffix")
	}
	if why := reason(validate(name)); why != "" {
		return "", bad(why)
	}
	return name, nil
}

// ChunksPrefix is the prefix of a graph's pins and lineage chunks.
func ChunksPrefix(graph string) string { return graph + "/chunks/" }

// TableChunksPrefix is the prefix of a table's manifest chunks.
func TableChunksPrefix(graph, table string) string { return TablePrefix(graph, table) + "chunks/" }

// ChunkKey is a map chunk's key: a manifest's under its table, pins' and lineage's under the graph.
func ChunkKey(graph string, kind MapKind, table string, h Hash) string {
	if kind == MapManifest {
		return TableChunksPrefix(graph, table) + h.String() + ".json"
	}
	return ChunksPrefix(graph) + h.String() + ".json"
}

// ParseChunkKey returns the hash a chunk key under prefix names.
func ParseChunkKey(prefix, key string) (Hash, error) {
	name, err := parseJSONKey("chunk key", prefix, key, func(string) error { return nil })
	if err != nil {
		return Hash{}, err
	}
	return ParseHash(name)
}

// GraftShaped reports whether key, at any depth, has the shape of a key graft
// writes for a graph (docs/format.md, *Ownership*), naming the shape:
//
//	*/graph.json
//	*/tables/*/objects/*, */tables/*/chunks/*, */tables/*/versions/*
//	*/trees/*, */refs/*, */chunks/*
//	*/uploads/*/*.json
//
// (leading and trailing * one or more segments, the table one). Such a key is
// never imported by reference, whether or not a graph exists there now.
func GraftShaped(key string) (string, bool) {
	segs := strings.Split(key, "/")
	n := len(segs)
	if n >= 2 && segs[n-1] == "graph.json" {
		return "*/graph.json", true
	}
	for i := 1; i < n-1; i++ {
		switch segs[i] {
		case "tables":
			if i+3 < n {
				switch segs[i+2] {
				case "objects", "chunks", "versions":
					return "*/tables/*/" + segs[i+2] + "/*", true
				}
			}
		case "trees", "refs", "chunks":
			return "*/" + segs[i] + "/*", true
		case "uploads":
			if i+2 < n && strings.HasSuffix(segs[n-1], ".json") {
				return "*/uploads/*/*.json", true
			}
		}
	}
	return "", false
}

// GraphPrefixesOf returns the prefixes "{p}/" of key, shortest first, whose
// last segment is a valid graph name: where a graph could own key.
func GraphPrefixesOf(key string) []string {
	var out []string
	for i := 0; i < len(key); i++ {
		if key[i] != '/' {
			continue
		}
		start := strings.LastIndexByte(key[:i], '/') + 1
		if ValidateGraphName(key[start:i]) == nil {
			out = append(out, key[:i+1])
		}
	}
	return out
}
