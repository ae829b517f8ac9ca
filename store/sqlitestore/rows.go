package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.RowEstimator = (*Store)(nil)
	_ readmodel.RowCounter   = (*Store)(nil)
)

// btreeProbes is how many root-to-leaf paths EstimateRows reads in each
// table's b-tree.
const btreeProbes = 8

// EstimateRows estimates the rows of each table from a probe of its
// b-tree, read through the sqlite_dbpage virtual table in one read
// transaction: btreeProbes paths from the root to a leaf, spread evenly
// over the tree, each page's cell count weighted by the fan-out above it
// (Knuth's estimate of a tree's size). It reads at most btreeProbes pages
// per level of each tree, about 30 pages per table at a million rows,
// whatever the size; it writes nothing and takes no lock that a writer
// waits for. A table that fits in one page is counted exactly; a larger
// one is usually within a few percent. See readmodel.RowEstimator.
//
// It neither counts (count(*) reads every page of the table) nor reads
// sqlite_stat1: that needs ANALYZE, which writes, goes stale between runs,
// and changes the query plans of the engine's own statements.
func (s *Store) EstimateRows(ctx context.Context) (map[string]int64, error) {
	if err := s.check("estimate rows"); err != nil {
		return nil, err
	}
	tx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: estimate rows: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // it only read
	roots, err := rootPages(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: estimate rows: %w", err)
	}
	out := make(map[string]int64, len(sqlq.Tables))
	pr := &pageReader{ctx: ctx, tx: tx, cache: map[uint32][]byte{}}
	for name, table := range sqlq.Tables {
		root, ok := roots[table]
		if !ok {
			continue // an older schema
		}
		n, err := estimateBtree(pr, root)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: estimate rows of %s: %w", table, err)
		}
		out[name] = n
	}
	return out, nil
}

func rootPages(ctx context.Context, tx *sql.Tx) (map[string]uint32, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name, rootpage FROM sqlite_schema WHERE type = 'table' AND name LIKE 'idem\_%' ESCAPE '\'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]uint32{}
	for rows.Next() {
		var name string
		var root uint32
		if err := rows.Scan(&name, &root); err != nil {
			return nil, err
		}
		out[name] = root
	}
	return out, rows.Err()
}

// pageReader reads database pages, each once.
type pageReader struct {
	ctx   context.Context
	tx    *sql.Tx
	cache map[uint32][]byte
}

func (r *pageReader) page(pgno uint32) ([]byte, error) {
	if p, ok := r.cache[pgno]; ok {
		return p, nil
	}
	var p []byte
	if err := r.tx.QueryRowContext(r.ctx, `SELECT data FROM sqlite_dbpage WHERE pgno = ?1`, pgno).Scan(&p); err != nil {
		return nil, fmt.Errorf("read page %d: %w", pgno, err)
	}
	r.cache[pgno] = p
	return p, nil
}

var errNotBtree = errors.New("not a b-tree page")

// The b-tree page types of the SQLite file format.
const (
	interiorIndex = 2
	interiorTable = 5
	leafIndex     = 10
	leafTable     = 13
)

// estimateBtree estimates the entries of the b-tree rooted at root: the
// rows of a table's b-tree (in its leaves) or of a WITHOUT ROWID table's
// index b-tree (in every page). Each probe descends by the fraction f of
// the tree it aims at, so that the probes spread evenly over the leaves.
func estimateBtree(r *pageReader, root uint32) (int64, error) {
	var sum float64
	for i := range btreeProbes {
		f := (float64(i) + 0.5) / btreeProbes
		pgno, weight, est := root, 1.0, 0.0
		for depth := 0; ; depth++ {
			if depth > 40 {
				return 0, fmt.Errorf("page %d: %w (a cycle)", pgno, errNotBtree)
			}
			p, err := r.page(pgno)
			if err != nil {
				return 0, err
			}
			h := 0
			if pgno == 1 {
				h = 100 // the file header
			}
			if len(p) < h+12 {
				return 0, fmt.Errorf("page %d: %w (%d bytes)", pgno, errNotBtree, len(p))
			}
			cells := int(binary.BigEndian.Uint16(p[h+3:]))
			switch p[h] {
			case leafTable, leafIndex:
				est += weight * float64(cells)
			case interiorTable, interiorIndex:
				if p[h] == interiorIndex {
					est += weight * float64(cells) // an index keeps entries in interior cells too
				}
				children := cells + 1
				c := min(int(f*float64(children)), cells)
				f = f*float64(children) - float64(c)
				weight *= float64(children)
				next, err := child(p, h, c, cells)
				if err != nil {
					return 0, fmt.Errorf("page %d: %w", pgno, err)
				}
				pgno = next
				continue
			default:
				return 0, fmt.Errorf("page %d: %w (type %d)", pgno, errNotBtree, p[h])
			}
			break
		}
		sum += est
	}
	return int64(sum/btreeProbes + 0.5), nil
}

// child returns the page number of child c of an interior page p whose
// header starts at h: the left child of cell c, or the right-most pointer
// for c == cells.
func child(p []byte, h, c, cells int) (uint32, error) {
	if c == cells {
		return binary.BigEndian.Uint32(p[h+8:]), nil
	}
	ptr := h + 12 + 2*c
	if ptr+2 > len(p) {
		return 0, fmt.Errorf("%w (cell %d of %d)", errNotBtree, c, cells)
	}
	off := int(binary.BigEndian.Uint16(p[ptr:]))
	if off+4 > len(p) {
		return 0, fmt.Errorf("%w (cell %d at %d)", errNotBtree, c, off)
	}
	return binary.BigEndian.Uint32(p[off:]), nil
}

// CountRows counts the rows of table up to limit; see readmodel.RowCounter.
func (s *Store) CountRows(ctx context.Context, table string, limit int64) (int64, error) {
	if err := s.check("count rows"); err != nil {
		return 0, err
	}
	t, ok := sqlq.Tables[table]
	if !ok {
		return 0, fmt.Errorf("sqlitestore: count rows of %q: no such table (want one of the store.Table names)", table)
	}
	var n int64
	// t is one of the constant names above, never caller input.
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+t+` LIMIT ?1)`, max(limit, 0)).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlitestore: count rows of %s: %w", t, err)
	}
	return n, nil
}
