-- The history index (index.sqlite) at index schema version 2, as quantem-harness wrote it
-- before Alembic (commit e95d5bb): sqlite_master of a new index and its index_meta row.
-- A byte-level fixture: never regenerate it to make a change pass.
CREATE TABLE index_meta (
	"key" VARCHAR NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
CREATE TABLE records (
	seq INTEGER NOT NULL, 
	sha256 VARCHAR(64) NOT NULL, 
	path VARCHAR NOT NULL, 
	size_bytes INTEGER NOT NULL, 
	schema_version INTEGER NOT NULL, 
	created_utc VARCHAR NOT NULL, 
	git_revision VARCHAR, 
	git_dirty BOOLEAN NOT NULL, 
	device_kind VARCHAR NOT NULL, 
	device_name VARCHAR NOT NULL, 
	device_uuid VARCHAR, 
	storage_id VARCHAR NOT NULL, 
	backend VARCHAR NOT NULL, 
	representation VARCHAR NOT NULL, 
	timing_boundary VARCHAR NOT NULL, 
	allocator_policy VARCHAR NOT NULL, 
	protocol_version INTEGER NOT NULL, 
	execution VARCHAR NOT NULL, 
	correctness VARCHAR NOT NULL, 
	source_stability VARCHAR NOT NULL, 
	performance VARCHAR NOT NULL, 
	exit_code INTEGER NOT NULL, 
	baseline_sha256 VARCHAR(64), 
	baseline_path VARCHAR, 
	comparison_key VARCHAR NOT NULL, 
	comparison_fields TEXT NOT NULL, 
	index_entry TEXT NOT NULL, 
	PRIMARY KEY (seq), 
	UNIQUE (sha256)
);
CREATE TABLE summaries (
	id INTEGER NOT NULL, 
	record_seq INTEGER NOT NULL, 
	acquisition VARCHAR NOT NULL, 
	format VARCHAR NOT NULL, 
	cache_state VARCHAR NOT NULL, 
	n INTEGER NOT NULL, 
	n_kept INTEGER NOT NULL, 
	first FLOAT, 
	median FLOAT, 
	p95 FLOAT, 
	min FLOAT, 
	max FLOAT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(record_seq) REFERENCES records (seq)
);
CREATE TABLE trials (
	id INTEGER NOT NULL, 
	record_seq INTEGER NOT NULL, 
	acquisition VARCHAR NOT NULL, 
	format VARCHAR NOT NULL, 
	cache_state VARCHAR NOT NULL, 
	trial_index INTEGER NOT NULL, 
	label VARCHAR NOT NULL, 
	kept BOOLEAN NOT NULL, 
	seconds FLOAT NOT NULL, 
	read_bytes INTEGER NOT NULL, 
	file_bytes INTEGER NOT NULL, 
	residency_before FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(record_seq) REFERENCES records (seq)
);
CREATE INDEX ix_records_comparison_key ON records (comparison_key);
CREATE INDEX ix_summaries_record_seq ON summaries (record_seq);
CREATE INDEX ix_trials_record_seq ON trials (record_seq);
INSERT INTO index_meta (key, value) VALUES ('schema_version', '2');
