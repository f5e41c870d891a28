DECLARE
    needs record;
    bad record;
BEGIN
    SELECT count(*) <> (SELECT count(*) FROM new_rows) AS rekeyed,
           coalesce(bool_or(
               o.state = 'terminal'
               OR n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
               OR n.created_ms <> o.created_ms
               OR n.generation < o.generation OR n.generation > o.generation + 1
               OR (n.generation = o.generation AND n.owner <> o.owner)
               OR n.writer <> n.owner OR n.writer_generation <> n.generation
               OR (o.state = 'sent' AND n.state = 'prepared')
               OR (o.state = 'accepted' AND n.state IN ('prepared', 'sent'))
               OR n.attempts < o.attempts), false) AS refused,
           coalesce(bool_or(n.generation <> o.generation), false) AS claimed,
           coalesce(bool_or(n.state = 'terminal'), false) AS ended,
           coalesce(bool_or(n.generation <> o.generation OR n.state <> o.state
                            OR n.attempts <> o.attempts
                            OR n.job_id IS DISTINCT FROM o.job_id), false) AS changed
      INTO needs
      FROM new_rows n JOIN old_rows o ON o.key = n.key;
    IF needs.rekeyed THEN
        SELECT o.key INTO bad FROM old_rows o
            WHERE NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.key = o.key) LIMIT 1;
        RAISE EXCEPTION 'call %: key, tool, intent and trace id never change', bad.key
            USING ERRCODE = 'AR003';
    END IF;
    IF needs.refused THEN
        SELECT
            CASE
              WHEN o.state = 'terminal' THEN 'AR001'
              WHEN n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
                   OR n.created_ms <> o.created_ms THEN 'AR003'
              WHEN n.generation < o.generation OR n.generation > o.generation + 1
                   OR (n.generation = o.generation AND n.owner <> o.owner)
                   OR n.writer <> n.owner OR n.writer_generation <> n.generation THEN 'AR002'
              ELSE 'AR003' END AS code,
            CASE
              WHEN o.state = 'terminal' THEN format('call %s: a terminal record is final', o.key)
              WHEN n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
                   OR n.created_ms <> o.created_ms
                THEN format('call %s: key, tool, intent and trace id never change', o.key)
              WHEN n.generation < o.generation OR n.generation > o.generation + 1
                   OR (n.generation = o.generation AND n.owner <> o.owner)
                THEN format('call %s: ownership moves only to the next generation (%s of %s -> %s of %s)',
                            o.key, o.generation, o.owner, n.generation, n.owner)
              WHEN n.writer <> n.owner OR n.writer_generation <> n.generation
                THEN format('call %s: write by %s under generation %s refused (fenced): the call is at generation %s of %s',
                            o.key, n.writer, n.writer_generation, n.generation, n.owner)
              ELSE format('call %s: state %s -> %s (attempts %s -> %s) moves backwards',
                          o.key, o.state, n.state, o.attempts, n.attempts) END AS msg
          INTO bad
          FROM old_rows o JOIN new_rows n ON n.key = o.key
          WHERE o.state = 'terminal'
             OR n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
             OR n.created_ms <> o.created_ms
             OR n.generation < o.generation OR n.generation > o.generation + 1
             OR (n.generation = o.generation AND n.owner <> o.owner)
             OR n.writer <> n.owner OR n.writer_generation <> n.generation
             OR (o.state = 'sent' AND n.state = 'prepared')
             OR (o.state = 'accepted' AND n.state IN ('prepared', 'sent'))
             OR n.attempts < o.attempts
          LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = bad.code, MESSAGE = bad.msg;
    END IF;
