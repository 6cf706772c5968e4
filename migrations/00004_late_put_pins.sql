-- 00004_late_put_pins: a pin can outlive its operation when a put it issued may still land.
--
-- A commit put that answered ambiguously (its answer lost, or held in the network) and was
-- then settled — a re-issue stored the same bytes — may still be delivered later. Were the
-- commit's key reclaimed in between, that late put would put the commit back on its
-- branch's chain pinning table versions already gone. Such a pin is marked late_put: the
-- operation's finish releases its other pins but keeps this one, so cleanup keeps the
-- commit and what it pins, until an operator releases it (graft op release-late-puts;
-- docs/operations.md) — no clock decides that the late put is dead.

-- +goose Up
ALTER TABLE op_pins
    ADD COLUMN late_put boolean NOT NULL DEFAULT false; -- a put of the key may still land: kept after the operation ends
COMMENT ON COLUMN op_pins.late_put IS 'A put of this key answered ambiguously and may still land; the pin outlives its operation until an operator releases it.';

-- +goose Down
ALTER TABLE op_pins
    DROP COLUMN late_put;
