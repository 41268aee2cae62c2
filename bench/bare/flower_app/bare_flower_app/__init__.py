"""A bare Flower App (no FLTest import): FedAvg of softmax regression on the SuperNodes' own partitions."""
