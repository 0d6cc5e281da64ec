import org.hibernate.Session;
import org.hibernate.SessionFactory;
import org.hibernate.Transaction;
import org.hibernate.cfg.Configuration;

/**
 * Several sessions insert orders in JDBC batches, as an application does,
 * each on its own thread: Hibernate asks orders_seq for an ID once per 50
 * orders (the pooled optimizer) and numbers the rest itself. Nothing here
 * knows about snowflake_id. Arguments: JDBC URL, sessions, orders per session.
 */
public class Orders {
    public static void main(String[] args) throws Exception {
        Configuration cfg = new Configuration()
            .setProperty("hibernate.dialect", "org.hibernate.dialect.PostgreSQLDialect")
            .setProperty("hibernate.connection.driver_class", "org.postgresql.Driver")
            .setProperty("hibernate.connection.url", args[0])
            .setProperty("hibernate.connection.username", "postgres")
            .setProperty("hibernate.connection.pool_size", "16")
            .setProperty("hibernate.jdbc.batch_size", "50")
            .setProperty("hibernate.id.new_generator_mappings", "true")
            .addFile("Order.hbm.xml");
        final SessionFactory factory = cfg.buildSessionFactory();
        int sessions = Integer.parseInt(args[1]);
        final int orders = Integer.parseInt(args[2]);
        Thread[] threads = new Thread[sessions];
        final Throwable[] failed = new Throwable[1];
        for (int s = 0; s < sessions; s++) {
            final int session = s;
            threads[s] = new Thread(() -> {
                try {
                    for (int batch = 0; batch < orders / 100; batch++) {
                        Session hs = factory.openSession();
                        Transaction tx = hs.beginTransaction();
                        for (int i = 0; i < 100; i++) {
                            hs.save(new Order(session, batch * 100 + i));
                        }
                        tx.commit();
                        hs.close();
                    }
                } catch (Throwable t) {
                    synchronized (failed) { failed[0] = t; }
                }
            });
            threads[s].start();
        }
        for (Thread t : threads) t.join();
        factory.close();
        if (failed[0] != null) {
            failed[0].printStackTrace();
            System.exit(1);
        }
    }
}
