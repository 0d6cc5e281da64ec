public class Order {
    private Long id;
    private int session;
    private int n;

    public Order() {}

    public Order(int session, int n) {
        this.session = session;
        this.n = n;
    }

    public Long getId() { return id; }
    public void setId(Long id) { this.id = id; }
    public int getSession() { return session; }
    public void setSession(int session) { this.session = session; }
    public int getN() { return n; }
    public void setN(int n) { this.n = n; }
}
