parameters { real y; vector[2] v; matrix[2, 3] M; }
model { }
