// Knex, unchanged: a table made by Knex's schema builder (bigIncrements, a
// bigserial key), filled by several concurrent sessions with single and
// multi-row inserts that return their keys. The sequence is registered after
// Knex created the table; nothing here knows about snowflake_id.
//
//   node knex_orders.js PORT DATABASE SESSIONS ORDERS [create]
const [port, database, sessions, orders, create] = process.argv.slice(2);
const knex = require('knex')({
  client: 'pg',
  connection: { host: '127.0.0.1', port: Number(port), user: 'postgres', database },
  pool: { min: 0, max: Number(sessions) },
});

async function session(s) {
  const made = [];
  // Keys arrive as strings: a snowflake ID does not fit a JavaScript number.
  for (let n = 0; n < orders / 2; n++) {
    const [row] = await knex('orders').insert({ session: s, n }).returning('id');
    made.push(row.id);
  }
  const rows = [];
  for (let n = orders / 2; n < orders; n++) rows.push({ session: s, n });
  for (const row of await knex('orders').insert(rows).returning('id')) made.push(row.id);
  const stored = (await knex('orders').where({ session: s }).orderBy('n').select('id')).map((r) => r.id);
  if (JSON.stringify(stored) !== JSON.stringify(made)) throw new Error(`session ${s}: returned keys differ from the stored`);
}

(async () => {
  try {
    if (create === 'create') {
      await knex.schema.createTable('orders', (t) => {
        t.bigIncrements('id');
        t.integer('session').notNullable();
        t.integer('n').notNullable();
      });
    } else {
      await Promise.all(Array.from({ length: Number(sessions) }, (_, s) => session(s)));
    }
  } catch (e) {
    console.error(e);
    process.exitCode = 1;
  } finally {
    await knex.destroy();
  }
})();
